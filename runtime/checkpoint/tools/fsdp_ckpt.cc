// fsdp-ckpt: look into distributed checkpoints and move weights in and out without a job
// (docs/checkpoints.md).
//
//   fsdp-ckpt inspect DIR   metadata: step, degrees, parameters and shapes, files, training-state keys
//   fsdp-ckpt verify DIR    the loader's checks without a model (metadata, training state, sizes, CRC32Cs); exit 1
//   naming each bad file fsdp-ckpt export DIR --out FILE.safetensors [--dtype fp32|bf16|fp16] [--hf --n-heads N]
//   fsdp-ckpt import FILE.safetensors... --out STEP_DIR [--hf --n-heads N] [--step S]
//
// DIR is a step directory or a checkpoint folder (then its latest committed step). export writes the
// parameters (no optimizer state) as one safetensors file; import reads one file or the shards of one
// checkpoint and writes a weights-only step directory that checkpoint.initial_load_path loads (and
// inspect/verify read). --hf: Hugging Face Llama names
// and q/k row order in the file; N is the model's query heads (the key-value heads follow from wk).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint/convert.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/inspect.h"

namespace ck = fsdp::runtime::checkpoint;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: fsdp-ckpt inspect DIR\n"
               "       fsdp-ckpt verify DIR\n"
               "       fsdp-ckpt export DIR --out FILE.safetensors [--dtype fp32|bf16|fp16] [--hf --n-heads N]\n"
               "       fsdp-ckpt import FILE.safetensors... --out STEP_DIR [--hf --n-heads N] [--step S]\n"
               "DIR: a checkpoint step directory (step-<N>) or a checkpoint folder (uses its latest step)\n"
               "--hf: Hugging Face Llama names and q/k row order in the file (N: query heads)\n");
  return 2;
}

struct Flags {
  std::string out;
  std::string dtype = "F32";
  bool hf = false;
  int64_t n_heads = 0;
  int64_t step = 0;
};

// argv[first..]: the flags above; throws CheckpointError naming a bad one.
Flags parse_flags(int argc, char** argv, int first) {
  Flags f;
  const std::map<std::string, std::string> dtypes = {{"fp32", "F32"},     {"float32", "F32"}, {"bf16", "BF16"},
                                                      {"bfloat16", "BF16"}, {"fp16", "F16"},   {"float16", "F16"}};
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw ck::CheckpointError(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto integer = [&](int& i) {
    const std::string flag = argv[i], v = value(i);
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 0) throw ck::CheckpointError(flag + " takes a non-negative integer, not '" + v + "'");
    return static_cast<int64_t>(n);
  };
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out") {
      f.out = value(i);
    } else if (a == "--dtype") {
      const std::string v = value(i);
      const auto it = dtypes.find(v);
      if (it == dtypes.end()) throw ck::CheckpointError("--dtype takes fp32, bf16 or fp16, not '" + v + "'");
      f.dtype = it->second;
    } else if (a == "--hf") {
      f.hf = true;
    } else if (a == "--n-heads") {
      f.n_heads = integer(i);
    } else if (a == "--step") {
      f.step = integer(i);
    } else {
      throw ck::CheckpointError("unknown option '" + a + "'");
    }
  }
  if (f.out.empty()) throw ck::CheckpointError("--out is required");
  if (f.hf && f.n_heads <= 0) throw ck::CheckpointError("--hf needs --n-heads N (the model's query heads)");
  return f;
}

int export_command(const std::string& dir, const Flags& flags) {
  const auto tensors = ck::read_step_dir_parameters(dir);
  ck::SafetensorsFormat format;
  format.dtype = flags.dtype;
  if (flags.hf) format.hf = ck::hf_heads_from_shapes(tensors, flags.n_heads);
  const auto meta = ck::read_metadata(dir);
  ck::write_safetensors(flags.out, tensors, {{"format", "pt"}, {"step", std::to_string(meta.step())}}, format);
  std::printf("exported %zu tensors of %s to %s (%s%s)\n", tensors.size(), dir.c_str(), flags.out.c_str(),
              flags.dtype.c_str(), flags.hf ? ", Hugging Face names" : "");
  return 0;
}

int import_command(const std::vector<std::string>& files, const Flags& flags) {
  ck::SafetensorsFormat format;
  if (flags.hf) {
    std::vector<ck::NamedTensor> shapes;  // TorchTitan names and shapes only, for the heads
    for (const auto& file : files) {
      for (const auto& e : ck::read_safetensors_header(file).tensors) {
        shapes.push_back(ck::NamedTensor{ck::from_hf_name(e.name), e.shape, {}});
      }
    }
    format.hf = ck::hf_heads_from_shapes(shapes, flags.n_heads);
  }
  const auto tensors = ck::read_safetensors(files, format);
  ck::write_weights_step_dir(flags.out, tensors, flags.step);
  std::printf("imported %zu tensors of %zu file(s) into %s (weights only, step %lld)\n", tensors.size(), files.size(),
              flags.out.c_str(), static_cast<long long>(flags.step));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "export" || cmd == "import") {
      std::vector<std::string> inputs;  // the positional arguments before the first flag
      int first_flag = 2;
      while (first_flag < argc && std::strncmp(argv[first_flag], "--", 2) != 0) inputs.push_back(argv[first_flag++]);
      if (inputs.empty() || (cmd == "export" && inputs.size() != 1)) return usage();
      const Flags flags = parse_flags(argc, argv, first_flag);
      return cmd == "export" ? export_command(ck::resolve_step_dir(inputs[0]), flags) : import_command(inputs, flags);
    }
    if (argc != 3) return usage();
    const std::string dir = ck::resolve_step_dir(argv[2]);
    if (cmd == "inspect") {
      std::fputs(ck::describe(ck::read_metadata(dir), dir).c_str(), stdout);
      return 0;
    }
    if (cmd == "verify") {
      const ck::VerifyReport r = ck::verify_checkpoint(dir);
      for (const auto& e : r.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
      if (!r.ok()) {
        std::fprintf(stderr, "FAILED: %zu problem(s) in %s\n", r.errors.size(), dir.c_str());
        return 1;
      }
      std::printf("OK: %s, %lld files, %lld chunks, %lld bytes verified\n", dir.c_str(), static_cast<long long>(r.files),
                  static_cast<long long>(r.chunks), static_cast<long long>(r.bytes));
      return 0;
    }
    std::fprintf(stderr, "unknown command '%s'\n", cmd.c_str());
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
