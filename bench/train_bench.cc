// fsdp-train-bench: what FSDP costs and hides in a real training step. Each scenario trains the debug
// model (configs/debug_model.toml unless --config) in separate processes over shared memory, ranks
// pinned to cores, and reports from rank 0:
//   - step time per token against the same model on 1 rank processing the same global batch;
//   - the share of all-gather and reduce-scatter time hidden behind compute (from the same spans the
//     trace shows), with prefetch on and off;
//   - the step-time cost of checkpointing every few steps, synchronous and asynchronous;
//   - the MoE debug flavor without and with expert parallelism (EP 2): tokens/s and the share of the
//     step spent in the tokens' all-to-alls, which block the compute (none of it is hidden).
// Medians over --repeats runs of the per-run medians (the first step of a run is warm-up and left out).
// --vs-torch then runs bench/vs_torch.py (fsdp-train at 1 and 2 ranks against the same Llama in PyTorch,
// eager and DDP over gloo, interleaved) with the same --steps and --repeats.
//
//   fsdp-train-bench [--config FILE] [--steps 20] [--repeats 3] [--markdown FILE] [--vs-torch]
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "launch/fork_ranks.h"
#include "launch/store.h"
#include "launch/thread_budget.h"
#include "launch/world.h"
#include "model/ops.h"
#include "train/config.h"
#include "train/train_job.h"

namespace {

namespace fs = std::filesystem;
using namespace fsdp;

struct Scenario {
  std::string name;
  int world = 2;
  std::vector<std::pair<std::string, std::string>> overrides;  // --section.key value
};

// What one run measured on rank 0.
struct Measured {
  double step_seconds = 0;       // median over steps 2..n
  double mean_step_seconds = 0;  // mean over steps 2..n (checkpoint saves land on some steps only)
  double ag_hidden = 0, rs_hidden = 0;
  int64_t tokens_per_step = 0;  // over all ranks
  double all_to_all_seconds = 0;  // per step, median over steps 2..n (expert parallelism only)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Runs one scenario as `world` processes and returns rank 0's numbers (written to a file, read here).
Measured run_scenario(const Scenario& sc, const std::string& config_file, int64_t steps, const fs::path& scratch) {
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  const fs::path result_file = scratch / "rank0.txt";
  launch::StoreServer store("127.0.0.1", 0);
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  const auto codes = launch::fork_ranks(sc.world, std::chrono::minutes(10), [&](int rank) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % cores, &set);
    ::sched_setaffinity(0, sizeof set, &set);
    // The forked rank inherited OpenBLAS's thread count of the parent (one per core): its share of the
    // one core it is pinned to, as fsdp-run would give it, unless the user chose.
    const launch::ThreadBudget threads = launch::decide_thread_budget(launch::available_cores(), 1,
                                                                      launch::user_set_thread_count());
    if (!threads.from_user) model::ops::set_blas_threads(threads.threads);
    train::CommandLine cl;
    cl.config_file = config_file;
    cl.overrides = sc.overrides;
    cl.overrides.emplace_back("training.steps", std::to_string(steps));
    cl.overrides.emplace_back("job.dump_folder", (scratch / "out").string());
    cl.overrides.emplace_back("metrics.file", "");
    train::TrainConfig config = train::load_train_config(cl);
    config.validate(sc.world);
    launch::BootstrapOverrides o;
    o.rank = rank;
    o.world_size = sc.world;
    o.local_rank = rank;
    o.local_world_size = sc.world;
    o.master_addr = store.host();
    o.master_port = store.port();
    launch::WorldOptions wo;
    wo.external_store = true;
    wo.transport = "shm";
    launch::World world = launch::connect_world(launch::detect_process_env(o), wo);
    const train::JobResult r = train::run_training_job(config, *world.comm);
    if (rank == 0) {
      std::vector<double> secs;
      for (size_t i = 1; i < r.steps.size(); ++i) secs.push_back(r.steps[i].seconds);
      double mean = 0;
      for (double s : secs) mean += s / static_cast<double>(secs.size());
      auto share = [&](const char* k) { return r.hidden_fraction.count(k) ? r.hidden_fraction.at(k) : 0.0; };
      std::ofstream out(result_file);
      out.precision(17);
      out << median(secs) << ' ' << mean << ' ' << share("all_gather") << ' ' << share("reduce_scatter") << ' '
          << r.steps.front().tokens * sc.world << ' ' << r.all_to_all_seconds_per_step << '\n';
    }
    return 0;
  });
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] != 0) {
      throw std::runtime_error("scenario '" + sc.name + "': rank " + std::to_string(r) + " exited with " +
                               std::to_string(codes[r]));
    }
  }
  Measured m;
  std::ifstream in(result_file);
  if (!(in >> m.step_seconds >> m.mean_step_seconds >> m.ag_hidden >> m.rs_hidden >> m.tokens_per_step >>
        m.all_to_all_seconds)) {
    throw std::runtime_error("scenario '" + sc.name + "': rank 0 wrote no result");
  }
  return m;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

std::string signed_percent(double fraction) { return (fraction >= 0 ? "+" : "") + fixed(100 * fraction, 1) + "%"; }

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "%s%susage: fsdp-train-bench [--config FILE] [--steps N] [--repeats R] [--markdown FILE] "
               "[--vs-torch]\n",
               error.c_str(), error.empty() ? "" : "\n");
  std::exit(error.empty() ? 0 : 2);
}

// Runs bench/vs_torch.py of the source tree this binary was built from, under Debian's torch
// (/usr/bin/python3), against this build; returns its exit status.
int run_vs_torch(int64_t steps, int repeats) {
  const std::string script = std::string(FSDP_SOURCE_DIR) + "/bench/vs_torch.py";
  std::vector<std::string> args = {"/usr/bin/python3", script,          "--build",  FSDP_BUILD_DIR,
                                   "--steps",          std::to_string(steps), "--repeats", std::to_string(repeats),
                                   "--config",         std::string(FSDP_SOURCE_DIR) + "/configs/debug_model.toml"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "fsdp-train-bench: cannot run %s %s: %s\n", argv[0], script.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_file = "configs/debug_model.toml", markdown;
  int64_t steps = 20;
  int repeats = 3;
  bool vs_torch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("fsdp-train-bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") {
      config_file = value();
    } else if (a == "--steps") {
      steps = std::atoll(value().c_str());
    } else if (a == "--repeats") {
      repeats = std::atoi(value().c_str());
    } else if (a == "--markdown") {
      markdown = value();
    } else if (a == "--vs-torch") {
      vs_torch = true;
    } else if (a == "-h" || a == "--help") {
      usage("");
    } else {
      usage("fsdp-train-bench: unknown option '" + a + "'");
    }
  }
  if (steps < 3 || repeats < 1) usage("fsdp-train-bench: --steps must be >= 3 and --repeats >= 1");

  // The same global batch (8 sequences) everywhere, so per-token times compare like for like.
  const std::vector<Scenario> scenarios = {
      {"1 rank", 1, {{"training.local_batch_size", "8"}}},
      {"FSDP 2 ranks, prefetch 1", 2, {{"training.local_batch_size", "4"}}},
      {"FSDP 2 ranks, prefetch 2", 2, {{"training.local_batch_size", "4"}, {"parallelism.prefetch", "2"}}},
      {"FSDP 2 ranks, prefetch 0", 2, {{"training.local_batch_size", "4"}, {"parallelism.prefetch", "0"}}},
      {"FSDP 2 ranks, checkpoint every 5 steps (sync)",
       2,
       {{"training.local_batch_size", "4"},
        {"checkpoint.enable_checkpoint", "true"},
        {"checkpoint.interval", "5"},
        {"checkpoint.last_save_model_only", "false"}}},  // every save a full one, the last too
      {"FSDP 2 ranks, checkpoint every 5 steps (async)",
       2,
       {{"training.local_batch_size", "4"},
        {"checkpoint.enable_checkpoint", "true"},
        {"checkpoint.interval", "5"},
        {"checkpoint.last_save_model_only", "false"},
        {"checkpoint.async_mode", "async"}}},
      {"MoE 2 ranks, EP 1", 2, {{"training.local_batch_size", "4"}, {"model.flavor", "debugmodel_byte_moe"}}},
      {"MoE 2 ranks, EP 2",
       2,
       {{"training.local_batch_size", "4"},
        {"model.flavor", "debugmodel_byte_moe"},
        {"parallelism.expert_parallel_degree", "2"}}},
  };
  const fs::path scratch = fs::temp_directory_path() / ("fsdp_train_bench_" + std::to_string(::getpid()));
  std::map<std::string, Measured> results;
  try {
    for (const auto& sc : scenarios) {
      std::vector<double> med, mean, ag, rs, a2a;
      int64_t tokens = 0;
      for (int k = 0; k < repeats; ++k) {
        const Measured m = run_scenario(sc, config_file, steps, scratch);
        med.push_back(m.step_seconds);
        mean.push_back(m.mean_step_seconds);
        ag.push_back(m.ag_hidden);
        rs.push_back(m.rs_hidden);
        a2a.push_back(m.all_to_all_seconds);
        tokens = m.tokens_per_step;
      }
      results[sc.name] = Measured{median(med), median(mean), median(ag), median(rs), tokens, median(a2a)};
      std::cerr << "fsdp-train-bench: " << sc.name << " done\n";
    }
  } catch (const std::exception& e) {
    fs::remove_all(scratch);
    std::fprintf(stderr, "fsdp-train-bench: %s\n", e.what());
    return 1;
  }
  fs::remove_all(scratch);

  const Measured& one = results.at("1 rank");
  const double one_per_token = one.step_seconds / static_cast<double>(one.tokens_per_step);
  const Measured& plain = results.at("FSDP 2 ranks, prefetch 1");
  std::ostringstream md;
  md << "| scenario | ranks | step (ms, median) | us per token | vs 1 rank | all-gather hidden | reduce-scatter "
        "hidden | mean step (ms) | checkpoint cost per step |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& sc : scenarios) {
    if (sc.name.starts_with("MoE")) continue;  // their own table below
    const Measured& m = results.at(sc.name);
    const double per_token = m.step_seconds / static_cast<double>(m.tokens_per_step);
    const bool ckpt = sc.name.find("checkpoint") != std::string::npos;
    md << "| " << sc.name << " | " << sc.world << " | " << fixed(1e3 * m.step_seconds, 2) << " | "
       << fixed(1e6 * per_token, 2) << " | " << fixed(per_token / one_per_token, 2) << "x | "
       << (sc.world > 1 ? fixed(100 * m.ag_hidden, 0) + "%" : "-") << " | "
       << (sc.world > 1 ? fixed(100 * m.rs_hidden, 0) + "%" : "-") << " | " << fixed(1e3 * m.mean_step_seconds, 2)
       << " | "
       << (ckpt ? signed_percent(m.mean_step_seconds / plain.mean_step_seconds - 1) : std::string("-"))
       << " |\n";
  }
  // MoE: the same global batch on the MoE debug flavor; the all-to-alls block the compute.
  md << "\n| scenario | ranks | step (ms, median) | tokens/s | all-to-all per step (ms) | all-to-all share of step "
        "| all-to-all hidden |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const auto& sc : scenarios) {
    if (!sc.name.starts_with("MoE")) continue;
    const Measured& m = results.at(sc.name);
    const bool ep = m.all_to_all_seconds > 0;
    md << "| " << sc.name << " | " << sc.world << " | " << fixed(1e3 * m.step_seconds, 2) << " | "
       << fixed(static_cast<double>(m.tokens_per_step) / m.step_seconds, 0) << " | "
       << (ep ? fixed(1e3 * m.all_to_all_seconds, 2) : "-") << " | "
       << (ep ? fixed(100 * m.all_to_all_seconds / m.step_seconds, 1) + "%" : "-") << " | "
       << (ep ? "0% (blocking)" : "-") << " |\n";
  }
  std::cout << md.str();
  if (!markdown.empty()) {
    std::ofstream out(markdown);
    out << md.str();
    if (!out) {
      std::fprintf(stderr, "fsdp-train-bench: cannot write '%s'\n", markdown.c_str());
      return 1;
    }
  }
  if (vs_torch) {
    std::cout << "\n";
    return run_vs_torch(steps, repeats);
  }
  return 0;
}
