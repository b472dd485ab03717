#include "runtime/checkpoint/state_tensors.h"

#include "runtime/checkpoint/checkpointer.h"
#include "common/knobs.h"
#include "proto/checkpoint.pb.h"
#include "common/crc32c.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace fsdp::runtime::checkpoint::detail {

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const size_t n = static_cast<size_t>(comm.size());
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  comm.all_gather(&len, lens.data(), 1, DataType::kInt64).wait();
  const int64_t widest = *std::max_element(lens.begin(), lens.end());
  std::vector<std::string> out(n);
  if (widest == 0) return out;
  std::vector<char> buf(n * static_cast<size_t>(widest));
  char* my_block = buf.data() + static_cast<size_t>(comm.rank()) * static_cast<size_t>(widest);
  std::memcpy(my_block, mine.data(), mine.size());
  comm.all_gather(my_block, buf.data(), static_cast<size_t>(widest), DataType::kUint8).wait();
  for (size_t r = 0; r < n; ++r) out[r].assign(buf.data() + r * static_cast<size_t>(widest), static_cast<size_t>(lens[r]));
  return out;
}

std::string agree_on_error(Communicator& comm, const std::string& mine) {
  const auto all = all_gather_strings(comm, mine);
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) return "rank " + std::to_string(r) + ": " + all[r];
  }
  return {};
}

namespace {

std::vector<TensorRef> refs_of(const spec::ModelSpec& model, const std::vector<std::string>& state_names) {
  std::vector<TensorRef> refs;
  for (int role = 0; role <= static_cast<int>(state_names.size()); ++role) {
    for (int u = 0; u < static_cast<int>(model.units.size()); ++u) {
      const auto& spec = model.units.at(static_cast<size_t>(u));
      for (int p = 0; p < static_cast<int>(spec.params.size()); ++p) {
        const auto& ps = spec.params[static_cast<size_t>(p)];
        refs.push_back(TensorRef{u, p, role, ps.name, role == 0 ? "param" : state_names[static_cast<size_t>(role - 1)],
                                 ps.shape});
      }
    }
  }
  return refs;
}

}  // namespace

std::vector<TensorRef> tensor_refs(FsdpModel& model, const std::vector<std::string>& state_names) {
  return refs_of(model.model(), state_names);
}

std::unordered_map<std::string, int> tensor_index(const std::vector<TensorRef>& refs) {
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < refs.size(); ++i) index[refs[i].role_name + "/" + refs[i].name] = static_cast<int>(i);
  return index;
}

std::vector<TensorRef> full_tensor_refs(const FsdpModel& model, const std::vector<std::string>& state_names) {
  return refs_of(model.full_model(), state_names);
}

std::span<float> shard_of(FsdpModel& model, ShardedOptimizer* optimizer, const TensorRef& t) {
  FsdpUnit& unit = model.unit(t.unit);
  const auto& pl = unit.layout().params().at(static_cast<size_t>(t.param));
  std::span<float> chunk = t.role == 0 ? unit.master_shard() : optimizer->state(t.unit).at(static_cast<size_t>(t.role - 1));
  return chunk.subspan(static_cast<size_t>(pl.offset_in_chunk), static_cast<size_t>(pl.shard_numel()));
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string shard_file_name(int64_t shard_rank, int64_t shard_degree) {
  auto pad = [](int64_t v) {
    std::string s = std::to_string(v);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return "shard-" + pad(shard_rank) + "-of-" + pad(shard_degree) + ".bin";
}

void fill_block_crcs(proto::checkpoint::Chunk& c, const char* data, int64_t block) {
  c.set_crc32c(crc32c(data, static_cast<size_t>(c.length())));
  for (int64_t b = 0; b < c.length(); b += block) {
    c.add_block_crc32c(crc32c(data + b, static_cast<size_t>(std::min(block, c.length() - b))));
  }
}

void count_file_written(int& written_this_save) {
  ++written_this_save;
  const int64_t kill_after = knobs::kFaultKillAfterCheckpointFiles.get();  // fault injection, 0: off
  if (kill_after > 0 && written_this_save >= kill_after) ::raise(SIGKILL);
}

}  // namespace fsdp::runtime::checkpoint::detail
