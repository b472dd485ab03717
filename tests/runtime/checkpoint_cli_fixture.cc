// Writes the checkpoints the fsdp-ckpt CLI tests read: DIR/good (2 ranks, step 5, AdamW, training
// state) and DIR/bad (the same with one flipped byte in shard 1).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint_support.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/training_state.h"
#include "tests/collectives/test_support.h"

namespace fs = std::filesystem;
namespace ck = fsdp::runtime::checkpoint;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  fs::remove_all(root);
  ck::CheckpointOptions o;
  o.folder = (root / "good").string();
  fsdp::testing::InProcJob job(2);
  job.run([&](fsdp::Communicator& c) {
    fsdp::testing::ToyJob t(c);
    ck::Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    for (int s = 0; s < 5; ++s) t.step(s);
    ckpt.save(5, "toy-config", {{ck::kDataLoaderKey, ck::encode_loader_position({.step = 6})}, {"lr_scheduler", "5"}});
  });
  fs::copy(root / "good", root / "bad", fs::copy_options::recursive);
  std::fstream f(root / "bad/step-5/shard-00001-of-00002.bin", std::ios::in | std::ios::out | std::ios::binary);
  char b = 0;
  f.seekg(3);
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x01);
  f.seekp(3);
  f.write(&b, 1);
  return f.good() ? 0 : 1;
}
