// Distributed checkpoints on the toy model: save at N ranks, load at M (resharding, HSDP), exact
// resume, fault handling (corruption, truncation, partial saves, wrong model), retention, the latest
// pointer, async save, safetensors export/import, and the pieces (CRC32C, JSON).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <random>

#include "checkpoint_support.h"
#include "common/json.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/inspect.h"
#include "runtime/checkpoint/metadata_check.h"
#include "runtime/checkpoint/metadata_file.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/training_state.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::InProcJob;
using testing::ScratchDir;
using testing::ToyJob;
using FullState = std::vector<std::vector<std::vector<float>>>;

constexpr const char* kHash = "toy-4-5-7-3";

CheckpointOptions options_for(const std::string& folder) {
  CheckpointOptions o;
  o.folder = folder;
  o.checksum_block_bytes = 12;  // tiny blocks: a resharded read verifies only part of a chunk
  return o;
}

// Trains `steps` steps at n ranks (replicate HSDP replicas), saves, returns rank 0's full state.
FullState train_and_save(int n, int64_t replicate, int steps, const CheckpointOptions& o, bool sgd = false) {
  InProcJob job(n);
  FullState state;
  job.run([&](Communicator& c) {
    ToyJob t(c, replicate, sgd);
    for (int s = 0; s < steps; ++s) t.step(s);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    auto full = t.full_state();
    ckpt.save(steps, kHash,
              {{kDataLoaderKey, encode_loader_position({.step = steps + 1, .token = 120 * steps})},
               {"rng", std::string("\0\1\2", 3)}});
    if (c.rank() == 0) state = std::move(full);
  });
  return state;
}

void expect_bitwise(const FullState& got, const FullState& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t u = 0; u < want.size(); ++u) {
    ASSERT_EQ(got[u].size(), want[u].size());
    for (size_t k = 0; k < want[u].size(); ++k) {
      ASSERT_EQ(got[u][k].size(), want[u][k].size());
      EXPECT_EQ(std::memcmp(got[u][k].data(), want[u][k].data(), want[u][k].size() * sizeof(float)), 0)
          << what << ": unit " << u << (k == 0 ? " parameters" : " optimizer state " + std::to_string(k - 1));
    }
  }
}

// --- pieces ---

// A safetensors file whose header is wrong is refused with the file and what is wrong in it.
TEST(CheckpointSafetensors, BadHeadersAreRefusedNamingFileAndTensor) {
  ScratchDir dir;
  auto write = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    const uint64_t len = header.size();
    std::memcpy(bytes.data(), &len, 8);
    bytes += header + std::string(data_bytes, '\0');
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  };
  auto error_of = [](const std::string& file) -> std::string {
    try {
      read_safetensors_header(file);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(read_safetensors_header(write("good.safetensors", good, 8)).tensors.size(), 1u);
  const struct {
    std::string header, want;
    size_t data = 8;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", "header: json: expected '}'"},
      {R"({"w":{"shape":[2],"data_offsets":[0,8]}})", "tensor 'w': json: missing key 'dtype'"},
      {R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", "tensor 'w': json: expected an integer"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "tensor 'w': data_offsets must have two entries"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,64]}})", "data_offsets of 'w' lie outside the file"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", "data_offsets of 'w' lie outside the file"},
      {R"(["w"])", "json: expected an object"},
  };
  int k = 0;
  for (const auto& c : cases) {
    const std::string file = write("bad" + std::to_string(k++) + ".safetensors", c.header, c.data);
    const std::string what = error_of(file);
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(c.want), std::string::npos) << what;
  }
}

// --- resharding ---

struct Reshard {
  int n;
  int64_t replicate_n;
  int m;
  int64_t replicate_m;
};

class CheckpointReshard : public ::testing::TestWithParam<Reshard> {};

TEST_P(CheckpointReshard, LoadedStateEqualsSavedBitwise) {
  const Reshard r = GetParam();
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  const FullState saved = train_and_save(r.n, r.replicate_n, 3, o);
  InProcJob job(r.m);
  std::mutex mu;
  job.run([&](Communicator& c) {
    ToyJob t(c, r.replicate_m);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    const LoadResult res = ckpt.load(kHash);
    EXPECT_EQ(res.step, 3);
    EXPECT_EQ(res.saved_shard_degree, r.n / r.replicate_n);
    EXPECT_EQ(res.training_state.at(kDataLoaderKey), encode_loader_position({.step = 4, .token = 360}));
    EXPECT_EQ(res.training_state.at("rng"), std::string("\0\1\2", 3));
    EXPECT_EQ(t.opt->steps_taken(), 3);
    // Padding of every shard is zero after the load.
    for (int u = 0; u < t.fsdp->num_units(); ++u) {
      const auto& layout = t.fsdp->unit(u).layout();
      for (size_t p = 0; p < layout.params().size(); ++p) {
        const auto& pl = layout.params()[p];
        const auto rows = pl.rows_of(t.fsdp->groups().shard_rank());
        for (int64_t i = rows.size() * pl.row_numel; i < pl.shard_numel(); ++i) {
          EXPECT_EQ(t.fsdp->unit(u).master_shard()[static_cast<size_t>(pl.offset_in_chunk + i)], 0.f);
        }
      }
    }
    const FullState got = t.full_state();
    std::lock_guard lock(mu);
    expect_bitwise(got, saved, "rank " + std::to_string(c.rank()));
  });
}

INSTANTIATE_TEST_SUITE_P(CheckpointLayouts, CheckpointReshard,
                         ::testing::Values(Reshard{1, 1, 2, 1}, Reshard{2, 1, 3, 1}, Reshard{4, 1, 2, 1}, Reshard{3, 1, 4, 1},
                                           Reshard{4, 1, 4, 1}, Reshard{4, 2, 3, 1}, Reshard{3, 1, 4, 2},
                                           Reshard{2, 1, 6, 1}),
                         [](const auto& info) {
                           const Reshard& r = info.param;
                           return "n" + std::to_string(r.n) + "x" + std::to_string(r.replicate_n) + "_to_m" +
                                  std::to_string(r.m) + "x" + std::to_string(r.replicate_m);
                         });

// A 8-step run at N = 4, saved at step 4 and resumed at M, gives the uninterrupted run's losses:
// within 1e-5 relative (summation order changes with M), bitwise when M == N.
class CheckpointResume : public ::testing::TestWithParam<int> {};

std::vector<double> uninterrupted_losses() {
  static const std::vector<double> losses = [] {
    std::vector<double> l;
    InProcJob job(4);
    job.run([&](Communicator& c) {
      ToyJob t(c);
      for (int s = 0; s < 8; ++s) {
        const double loss = t.step(s);
        if (c.rank() == 0) l.push_back(loss);
      }
    });
    return l;
  }();
  return losses;
}

TEST_P(CheckpointResume, ContinuesLikeTheUninterruptedRun) {
  const int m = GetParam();
  const auto want = uninterrupted_losses();
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  std::vector<double> got;
  {
    InProcJob job(4);
    job.run([&](Communicator& c) {
      ToyJob t(c);
      Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
      for (int s = 0; s < 4; ++s) {
        const double loss = t.step(s);
        if (c.rank() == 0) got.push_back(loss);
      }
      ckpt.save(4, kHash, {{"next_step", "4"}});
    });
  }
  InProcJob job(m);
  job.run([&](Communicator& c) {
    ToyJob t(c);  // initialised differently from what it loads: the load must overwrite everything
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    const LoadResult res = ckpt.load(kHash);
    for (int64_t s = std::stoll(res.training_state.at("next_step")); s < 8; ++s) {
      const double loss = t.step(s);
      if (c.rank() == 0) got.push_back(loss);
    }
  });
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    if (m == 4) {
      EXPECT_EQ(got[s], want[s]) << "step " << s + 1 << " (bitwise at M == N)";
    } else {
      EXPECT_NEAR(got[s], want[s], 1e-5 * std::abs(want[s])) << "step " << s + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CheckpointDegrees, CheckpointResume, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "m" + std::to_string(info.param); });

TEST(Checkpoint, SgdMomentumRoundTripAndOptimizerMismatchRefused) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  const FullState saved = train_and_save(2, 1, 2, o, /*sgd=*/true);
  InProcJob job(3);
  job.run([&](Communicator& c) {
    {
      ToyJob t(c, 1, /*sgd=*/true);
      Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
      ckpt.load(kHash);
      const FullState got = t.full_state();
      if (c.rank() == 0) expect_bitwise(got, saved, "sgd");
    }
    ToyJob adam(c);
    Checkpointer ckpt(*adam.fsdp, adam.opt.get(), c, o, adam.tracker);
    try {
      ckpt.load(kHash);
      ADD_FAILURE() << "an AdamW run loaded SGD state";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("'sgd_momentum' but this run uses 'adamw'"), std::string::npos) << e.what();
    }
  });
}

// A model-only save (async too) holds the parameters only; load_model() reads them at another degree
// from the step directory or the folder, leaving the optimizer fresh (zero state, 0 steps); load()
// refuses it, and load_model() reads the parameters of a full save too.
TEST(Checkpoint, ModelOnlySaveAndLoad) {
  ScratchDir dir;
  CheckpointOptions o = options_for(dir.path());
  o.async = true;
  FullState saved;
  {
    InProcJob job(2);
    job.run([&](Communicator& c) {
      ToyJob t(c);
      for (int s = 0; s < 2; ++s) t.step(s);
      Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
      ckpt.save(2, kHash, {{kDataLoaderKey, encode_loader_position({.step = 3})}}, /*model_only=*/true);
      ckpt.save(3, kHash);  // a full save
      ckpt.wait();
      auto full = t.full_state();
      if (c.rank() == 0) saved = std::move(full);
    });
  }
  const auto meta = read_metadata(dir / "step-2");
  EXPECT_EQ(meta.optimizer(), "");
  EXPECT_EQ(meta.tensors_size(), static_cast<int>(saved.size() * 2));  // 6 parameters, no state
  InProcJob job(3);
  job.run([&](Communicator& c) {
    for (const std::string& path : {dir / "step-2", dir / "step-3", dir.path()}) {
      ToyJob t(c);
      Checkpointer ckpt(*t.fsdp, t.opt.get(), c, options_for(dir / "other"), t.tracker);
      const LoadResult r = ckpt.load_model(path);
      EXPECT_EQ(r.dir, path == dir.path() ? dir / "step-3" : path);
      EXPECT_EQ(t.opt->steps_taken(), 0);
      const FullState got = t.full_state();
      if (c.rank() == 0) {
        for (size_t u = 0; u < saved.size(); ++u) {
          EXPECT_EQ(got[u][0], saved[u][0]) << path << " unit " << u;
          for (size_t k = 1; k < got[u].size(); ++k) {
            EXPECT_EQ(got[u][k], std::vector<float>(got[u][k].size(), 0.f)) << "optimizer state stays fresh";
          }
        }
      }
    }
    ToyJob t(c);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    try {
      ckpt.load(kHash, 2);
      ADD_FAILURE() << "resumed from a model-only save";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("'none (a model-only save)' but this run uses 'adamw'"), std::string::npos)
          << e.what();
    }
  });
}

// --- faults ---

std::string load_error(const CheckpointOptions& o, int m, const std::string& hash = kHash, testing::ToyModel toy = {}) {
  std::string error;
  std::mutex mu;
  InProcJob job(m);
  job.run([&](Communicator& c) {
    ToyJob t(c, 1, false, toy);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    try {
      ckpt.load(hash);
      ADD_FAILURE() << "load succeeded on rank " << c.rank();
    } catch (const CheckpointError& e) {
      std::lock_guard lock(mu);
      if (c.rank() == 0) error = e.what();
    }
  });
  return error;
}

TEST(CheckpointFaults, CorruptedByteNamesFileAndParameter) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(2, 1, 1, o);
  const std::string file = dir / "step-1/shard-00001-of-00002.bin";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(5);
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x10);
    f.seekp(5);
    f.write(&b, 1);
  }
  const std::string e = load_error(o, 2);
  EXPECT_NE(e.find("checksum mismatch in shard file " + file), std::string::npos) << e;
  EXPECT_NE(e.find("parameter 'fc0.weight' (param)"), std::string::npos) << e;
  const VerifyReport v = verify_checkpoint(dir / "step-1");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.errors[0].find(file), std::string::npos) << v.errors[0];
}

TEST(CheckpointFaults, TruncatedFileNamed) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(3, 1, 1, o);
  const std::string file = dir / "step-1/shard-00002-of-00003.bin";
  fs::resize_file(file, fs::file_size(file) - 7);
  const std::string e = load_error(o, 2);
  EXPECT_NE(e.find(file), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_FALSE(verify_checkpoint(dir / "step-1").ok());
}

// Verify means load: each corruption of the metadata (or a missing shard file) is refused by
// `fsdp-ckpt verify` and by the loader, both naming the field, through the one check_metadata() and the
// one ShardReader; a chunk length of 2^62 is refused before any allocation (it used to end in
// std::bad_alloc), a checksum block near 2^63 without overflow, a damaged data-loader entry by both.
TEST(CheckpointFaults, VerifyRefusesWhatTheLoaderRefusesNamingTheField) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(2, 1, 1, o);
  const std::string step = dir / "step-1";
  const std::string meta_file = step + "/metadata.pb";
  const std::string good = read_file(meta_file);
  using Edit = std::function<void(proto::checkpoint::CheckpointMetadata&)>;
  struct Case {
    std::string name;
    Edit edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"empty metadata", [](auto& m) { m.Clear(); }, "format_version 0"},
      {"format version 9", [](auto& m) { m.set_format_version(9); }, "format_version 9"},
      {"negative shape", [](auto& m) { m.mutable_tensors(0)->set_shape(1, -4); }, "shape[1] = -4 is negative"},
      {"row_begin > row_end",
       [](auto& m) {
         auto* c = m.mutable_tensors(0)->mutable_chunks(0);
         c->set_row_begin(c->row_end() + 1);
       },
       "row_begin/row_end"},
      {"chunk length 2^62", [](auto& m) { m.mutable_tensors(0)->mutable_chunks(0)->set_length(int64_t{1} << 62); },
       "length 4611686018427387904"},
      {"absurd file size", [](auto& m) { m.mutable_files(0)->set_bytes(int64_t{1} << 62); }, "metadata records"},
      {"shard_degree 0", [](auto& m) { m.set_shard_degree(0); }, "shard_degree 0 must be >= 1"},
      {"a dropped chunk", [](auto& m) { m.mutable_tensors(0)->mutable_chunks()->RemoveLast(); }, "chunks cover rows"},
      // Near 2^63: the reader's block rounding overflowed int64 and the loader said only "inconsistent".
      {"checksum block 2^63 - 1", [](auto& m) { m.set_checksum_block_bytes(std::numeric_limits<int64_t>::max()); },
       "checksum_block_bytes 9223372036854775807 must be a positive multiple of 4"},
      {"checksum block 2^63 - 4", [](auto& m) { m.set_checksum_block_bytes(std::numeric_limits<int64_t>::max() - 3); },
       "block_crc32c for length"},
      // The training state's data-loader entry: verify used to pass what the trainer's resume refused.
      {"data_loader of 3 bytes", [](auto& m) { (*m.mutable_training_state())[kDataLoaderKey] = "abc"; },
       "training_state['data_loader']: 3 bytes, expected 40"},
      {"data_loader step 0",
       [](auto& m) { (*m.mutable_training_state())[kDataLoaderKey] = encode_loader_position({.step = 0}); },
       "training_state['data_loader']: step 0 must be >= 1"},
      {"data_loader negative offset",
       [](auto& m) { (*m.mutable_training_state())[kDataLoaderKey] = encode_loader_position({.offset = -5}); },
       "training_state['data_loader']: offset -5 must be >= 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    proto::checkpoint::CheckpointMetadata meta = detail::decode_metadata(good, meta_file);
    c.edit(meta);
    // With a valid checksum: what a buggy writer (not a flipped bit) would leave.
    write_file_atomic(meta_file, detail::encode_metadata(meta));
    const VerifyReport v = verify_checkpoint(step);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.errors[0].find(c.field), std::string::npos) << v.errors[0];
    const std::string e = load_error(o, 2);
    EXPECT_NE(e.find(c.field), std::string::npos) << e;
  }
  write_file_atomic(meta_file, good);
  ASSERT_TRUE(verify_checkpoint(step).ok());
  // A missing shard file: verify names it; the loader refuses it too.
  const std::string shard = step + "/shard-00001-of-00002.bin";
  fs::rename(shard, shard + ".away");
  const VerifyReport v = verify_checkpoint(step);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.errors[0].find(shard), std::string::npos) << v.errors[0];
  EXPECT_NE(load_error(o, 2).find(shard), std::string::npos);
}

// Found while fuzzing check_metadata (fuzz/checkpoint_metadata.cc; the input is also a seed there,
// fuzz/corpus/checkpoint_metadata/block_count_overflow): a chunk of 2^63 - 4 bytes, which the length and
// file checks accept, with checksum blocks of 2^62 bytes made the block count overflow int64 (undefined
// behaviour, reported by UBSan). The count is now taken in 128 bits: 2 blocks pass, 1 is refused.
TEST(CheckpointFaults, BlockCountOfTheLargestChunkDoesNotOverflow) {
  constexpr int64_t kRowElements = (int64_t{1} << 61) - 1;  // x 4 bytes = 2^63 - 4
  proto::checkpoint::CheckpointMetadata meta;
  meta.set_format_version(2);
  meta.set_shard_degree(1);
  meta.set_replicate_degree(1);
  meta.set_checksum_block_bytes(int64_t{1} << 62);
  auto* file = meta.add_files();
  file->set_name("f");
  file->set_bytes(std::numeric_limits<int64_t>::max());
  auto* t = meta.add_tensors();
  t->set_name("w");
  t->set_role("param");
  t->add_shape(1);
  t->add_shape(kRowElements);
  auto* c = t->add_chunks();
  c->set_file("f");
  c->set_row_begin(0);
  c->set_row_end(1);
  c->set_length(kRowElements * 4);
  c->add_block_crc32c(7);
  c->add_block_crc32c(7);
  EXPECT_NO_THROW(detail::check_metadata(meta, "step-0"));
  c->mutable_block_crc32c()->RemoveLast();
  try {
    detail::check_metadata(meta, "step-0");
    ADD_FAILURE() << "one checksum block for 2^63 - 4 bytes in blocks of 2^62 was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("1 block_crc32c for length 9223372036854775804"), std::string::npos)
        << e.what();
  }
}

// Any single flipped bit of metadata.pb is refused by verify and by the loader, even where the
// flipped message still parses and passes every field check (the step, the model hash, the training
// state): the CRC32C footer catches it. A format 1 file (no footer) still loads.
TEST(CheckpointFaults, EveryBitFlipOfTheMetadataIsRefused) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(2, 1, 1, o);
  const std::string step = dir / "step-1";
  const std::string meta_file = step + "/metadata.pb";
  const std::string good = read_file(meta_file);
  ASSERT_GT(good.size(), 8u);
  std::mt19937 rng(15);
  for (int i = 0; i < 40; ++i) {
    std::string bad = good;
    const size_t bit = rng() % (bad.size() * 8);
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write_file_atomic(meta_file, bad);
    const VerifyReport v = verify_checkpoint(step);
    ASSERT_FALSE(v.ok()) << "bit " << bit;
    if (bit / 8 + 8 < good.size()) {
      EXPECT_NE(v.errors[0].find("checksum mismatch"), std::string::npos) << v.errors[0];
    }
  }
  // One flip the old format could not see: the step number, rewritten with a valid protobuf.
  std::string bad = good;
  proto::checkpoint::CheckpointMetadata meta = detail::decode_metadata(good, meta_file);
  meta.set_step(meta.step() + 1);
  std::string serialized = meta.SerializeAsString();
  write_file_atomic(meta_file, serialized + good.substr(good.size() - 8));  // the old footer
  EXPECT_NE(verify_checkpoint(step).errors.at(0).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(load_error(o, 2).find("checksum mismatch"), std::string::npos);
  // Format 1: no footer at all.
  meta = detail::decode_metadata(good, meta_file);
  meta.set_format_version(1);
  write_file_atomic(meta_file, meta.SerializeAsString());
  EXPECT_TRUE(verify_checkpoint(step).ok());
  // Format 2 without its footer: truncated.
  meta.set_format_version(2);
  write_file_atomic(meta_file, meta.SerializeAsString());
  EXPECT_NE(verify_checkpoint(step).errors.at(0).find("without its checksum footer"), std::string::npos);
  write_file_atomic(meta_file, good);
  EXPECT_TRUE(verify_checkpoint(step).ok());
}

TEST(CheckpointFaults, WrongModelRefusedNamingTheMismatch) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(2, 1, 1, o);
  std::string e = load_error(o, 2, "another-config");
  EXPECT_NE(e.find("model config hash '" + std::string(kHash) + "' but this run's is 'another-config'"), std::string::npos) << e;
  testing::ToyModel wider;
  wider.widths = {4, 6, 7, 3};
  e = load_error(o, 2, kHash, wider);
  EXPECT_NE(e.find("parameter 'fc0.weight' has shape [5, 4] in the checkpoint but [6, 4] in the model"), std::string::npos) << e;
  testing::ToyModel deeper;
  deeper.widths = {4, 5, 7, 3, 2};
  e = load_error(o, 2, kHash, deeper);
  EXPECT_NE(e.find("parameter 'fc3.weight' is missing from the checkpoint"), std::string::npos) << e;
}

TEST(CheckpointFaults, PartialSaveIgnoredAndCleaned) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  train_and_save(2, 1, 2, o);
  // What a crash mid-save leaves: a temporary directory with some files, and a stray pointer temp.
  fs::create_directories(dir / ".tmp-step-9-0123456789ab");
  std::ofstream(dir / ".tmp-step-9-0123456789ab/shard-00000-of-00002.bin") << "partial";
  std::ofstream(dir / "latest.tmp-42") << "step-9";
  EXPECT_EQ(latest_step(dir.path()), 2);
  InProcJob job(2);
  job.run([&](Communicator& c) {
    ToyJob t(c);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    EXPECT_EQ(ckpt.load(kHash).step, 2);
  });
  EXPECT_FALSE(fs::exists(dir / ".tmp-step-9-0123456789ab"));
  EXPECT_FALSE(fs::exists(dir / "latest.tmp-42"));
}

// --- the folder ---

TEST(CheckpointFolder, KeepLatestKAndLatestPointer) {
  ScratchDir dir;
  CheckpointOptions o = options_for(dir.path());
  o.keep_latest_k = 2;
  InProcJob job(2);
  job.run([&](Communicator& c) {
    ToyJob t(c);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    for (int64_t s = 1; s <= 4; ++s) {
      t.step(s);
      ckpt.save(s, kHash, {{"step", std::to_string(s)}});
    }
    try {
      ckpt.save(4, kHash);
      ADD_FAILURE() << "overwrote a committed checkpoint";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(committed_steps(dir.path()), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(read_file(dir / "latest"), "step-4\n");
  EXPECT_EQ(latest_step(dir.path()), 4);

  auto loaded_step = [&](int64_t which) {
    std::string s;
    InProcJob j(2);
    j.run([&](Communicator& c) {
      ToyJob t(c);
      Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
      const std::string v = ckpt.load(kHash, which).training_state.at("step");
      if (c.rank() == 0) s = v;
    });
    return s;
  };
  write_file_atomic(dir / "latest", "step-3\n");
  EXPECT_EQ(loaded_step(-1), "3");  // the pointer wins over the highest step
  fs::remove(dir / "latest");
  EXPECT_EQ(loaded_step(-1), "4");  // no pointer: the scan
  write_file_atomic(dir / "latest", "step-17\n");
  EXPECT_EQ(latest_step(dir.path()), 4);  // stale pointer: the scan
  EXPECT_EQ(loaded_step(3), "3");        // TorchTitan's load_step
  fs::remove_all(dir / "step-4/metadata.pb");  // uncommitted directories do not count
  EXPECT_EQ(committed_steps(dir.path()), (std::vector<int64_t>{3}));
}

TEST(CheckpointFolder, MissingCheckpointIsAnError) {
  ScratchDir dir;
  const CheckpointOptions o = options_for(dir.path());
  EXPECT_EQ(latest_step(dir.path()), std::nullopt);
  EXPECT_NE(load_error(o, 2).find("no committed checkpoint"), std::string::npos);
  train_and_save(2, 1, 1, o);
  InProcJob job(2);
  job.run([&](Communicator& c) {
    ToyJob t(c);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    try {
      ckpt.load(kHash, 7);
      ADD_FAILURE();
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("no committed checkpoint step-7 in '" + dir.path() + "' (committed: 1)"),
                std::string::npos)
          << e.what();
    }
  });
}

// --- async ---

TEST(CheckpointAsync, WritesTheSnapshotBytesOfASyncSave) {
  ScratchDir sync_dir, async_dir;
  CheckpointOptions so = options_for(sync_dir.path());
  CheckpointOptions ao = options_for(async_dir.path());
  ao.async = true;
  InProcJob job(3);
  std::vector<int64_t> snapshot_peak(3);
  job.run([&](Communicator& c) {
    ToyJob t(c);
    t.step(0);
    Checkpointer sync_ckpt(*t.fsdp, t.opt.get(), c, so, t.tracker);
    Checkpointer async_ckpt(*t.fsdp, t.opt.get(), c, ao, t.tracker);
    sync_ckpt.save(1, kHash, {{"k", "v"}});
    async_ckpt.save(1, kHash, {{"k", "v"}});
    t.step(1);  // training goes on and changes the shards while the write may still run
    t.step(2);
    async_ckpt.save(3, kHash);  // waits for step 1's write first
    async_ckpt.wait();
    EXPECT_FALSE(async_ckpt.save_in_flight());
    snapshot_peak[static_cast<size_t>(c.rank())] = t.tracker.peak(MemoryCategory::kOther);
    EXPECT_EQ(t.tracker.current(MemoryCategory::kOther), 0) << "snapshot not released";
  });
  for (int64_t p : snapshot_peak) EXPECT_GT(p, 0);
  for (const auto& entry : fs::directory_iterator(sync_dir / "step-1")) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(read_file(entry.path().string()) == read_file(async_dir / ("step-1/" + name))) << name << " differs";
  }
  EXPECT_EQ(committed_steps(async_dir.path()), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(verify_checkpoint(async_dir / "step-3").ok());
}

// --- safetensors ---

TEST(CheckpointSafetensors, RoundTripAcrossDegreesWithAParsableHeader) {
  ScratchDir dir;
  const std::string file = dir / "model.safetensors";
  FullState saved;
  {
    InProcJob job(4);
    job.run([&](Communicator& c) {
      ToyJob t(c, /*replicate=*/2);
      t.step(0);
      export_safetensors(*t.fsdp, c, file, {{"step", "1"}, {"format", "pt"}});
      auto full = t.full_state();
      if (c.rank() == 0) saved = std::move(full);
    });
  }
  // The header, parsed independently of read_safetensors_header.
  const std::string bytes = read_file(file);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len % 8, 0u);
  const auto root = fsdp::json::parse(std::string_view(bytes).substr(8, len));
  EXPECT_EQ(root.at("__metadata__").at("step").string(), "1");
  const auto spec = testing::ToyModel{}.spec();
  int64_t expect_begin = 0;
  for (size_t u = 0; u < spec.units.size(); ++u) {
    for (size_t p = 0; p < spec.units[u].params.size(); ++p) {
      const auto& ps = spec.units[u].params[p];
      const auto& e = root.at(ps.name);
      EXPECT_EQ(e.at("dtype").string(), "F32");
      std::vector<int64_t> shape;
      for (const auto& d : e.at("shape").array()) shape.push_back(d.integer());
      EXPECT_EQ(shape, ps.shape) << ps.name;
      const auto& off = e.at("data_offsets").array();
      EXPECT_EQ(off.at(0).integer(), expect_begin) << ps.name;
      EXPECT_EQ(off.at(1).integer(), expect_begin + ps.numel() * 4) << ps.name;
      // The data is the full parameter, param-major within the unit.
      const size_t param_offset = p == 0 ? 0 : static_cast<size_t>(spec.units[u].params[0].numel());
      EXPECT_EQ(std::memcmp(bytes.data() + 8 + len + expect_begin, saved[u][0].data() + param_offset,
                            static_cast<size_t>(ps.numel() * 4)),
                0)
          << ps.name;
      expect_begin += ps.numel() * 4;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), static_cast<int64_t>(8 + len) + expect_begin);
  EXPECT_EQ(read_safetensors_header(file).tensors.size(), 6u);

  InProcJob job(3);
  job.run([&](Communicator& c) {
    ToyJob t(c);
    const auto meta = import_safetensors(*t.fsdp, c, file);
    EXPECT_EQ(meta.at("format"), "pt");
    const FullState got = t.full_state();
    for (size_t u = 0; u < saved.size(); ++u) EXPECT_EQ(got[u][0], saved[u][0]) << "unit " << u;
  });

  // A model of another shape is refused by name.
  InProcJob other(2);
  other.run([&](Communicator& c) {
    testing::ToyModel wider;
    wider.widths = {4, 6, 7, 3};
    ToyJob t(c, 1, false, wider);
    try {
      import_safetensors(*t.fsdp, c, file);
      ADD_FAILURE();
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'fc0.weight' has shape [5, 4], the model's is [6, 4]"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace fsdp::runtime::checkpoint
