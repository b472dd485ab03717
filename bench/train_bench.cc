// fsdp-train-bench: what FSDP costs and hides in a real training step. Each scenario trains the debug
// model (configs/debug_model.toml unless --config) in separate processes over shared memory, ranks
// pinned to cores, and reports from rank 0:
//   - step time per token against the same model on 1 rank processing the same global batch;
//   - the share of all-gather and reduce-scatter time hidden behind compute (from the same spans the
//     trace shows), with prefetch on and off;
//   - the step-time cost of checkpointing every few steps, synchronous and asynchronous;
//   - the MoE debug flavor without and with expert parallelism (EP 2): tokens/s and the share of the
//     step spent in the tokens' all-to-alls, which block the compute (none of it is hidden);
//   - over TCP (loopback), bf16 parameters with bf16 all-gathers and f32 reduce-scatters against MXFP8
//     all-gathers, reduce-scatters and both (training.param_comm_dtype / grad_comm_dtype, docs/mxfp8.md).
// Medians over --repeats runs of the per-run medians (the first step of a run is warm-up and left out);
// the repeats are interleaved (every scenario once, then again), so load drifting on a shared machine
// lands on all of them. --only TEXT runs the scenarios whose name contains TEXT.
// --vs-torch then runs bench/vs_torch.py (fsdp-train at 1 and 2 ranks against the same Llama in PyTorch,
// eager and DDP over gloo, interleaved) with the same --steps and --repeats.
//
//   fsdp-train-bench [--config FILE] [--steps 20] [--repeats 3] [--only TEXT] [--markdown FILE] [--vs-torch]
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

#include "bench/forked_rank.h"
#include "launch/fork_ranks.h"
#include "launch/store.h"
#include "launch/thread_budget.h"
#include "launch/world.h"
#include "model/blas_core.h"
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
  std::string transport = "shm";
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
  const auto codes = launch::fork_ranks(sc.world, std::chrono::minutes(10), [&](int rank) {
    bench::pin_to_core(rank);
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
    launch::World world = bench::connect_forked_rank(rank, sc.world, store, sc.transport);
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
               "%s%susage: fsdp-train-bench [--config FILE] [--steps N] [--repeats R] [--only TEXT] "
               "[--markdown FILE] [--vs-torch]\n",
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

// Every scenario: the same global batch (8 sequences) everywhere, so per-token times compare like for like.
std::vector<Scenario> all_scenarios() {
  std::vector<Scenario> scenarios = {
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
  // Communication precision over TCP, where bytes cost the most here: bf16 parameters throughout.
  const std::pair<const char*, std::vector<std::pair<std::string, std::string>>> wire[] = {
      {"bf16 all-gathers, f32 reduce-scatters", {}},
      {"MXFP8 all-gathers", {{"training.param_comm_dtype", "mxfp8"}}},
      {"MXFP8 reduce-scatters", {{"training.grad_comm_dtype", "mxfp8"}}},
      {"MXFP8 both", {{"training.param_comm_dtype", "mxfp8"}, {"training.grad_comm_dtype", "mxfp8"}}},
  };
  for (const auto& [what, keys] : wire) {
    Scenario sc{std::string("TCP 2 ranks, ") + what, 2,
                {{"training.local_batch_size", "4"}, {"training.mixed_precision_param", "bfloat16"}}, "tcp"};
    sc.overrides.insert(sc.overrides.end(), keys.begin(), keys.end());
    scenarios.push_back(std::move(sc));
  }
  return scenarios;
}

// Each scenario `repeats` times, interleaved; the medians per scenario. Throws what a run threw.
std::map<std::string, Measured> run_repeats(const std::vector<Scenario>& scenarios, const std::string& config_file,
                                            int64_t steps, int repeats, const fs::path& scratch) {
  std::map<std::string, Measured> results;
  std::map<std::string, std::vector<Measured>> runs;
  for (int k = 0; k < repeats; ++k) {
    for (const auto& sc : scenarios) runs[sc.name].push_back(run_scenario(sc, config_file, steps, scratch));
    std::cerr << "fsdp-train-bench: repeat " << k + 1 << " of " << repeats << " done\n";
  }
  for (const auto& [name, ms] : runs) {
    auto med = [&](double Measured::*field) {
      std::vector<double> v;
      for (const Measured& m : ms) v.push_back(m.*field);
      return median(v);
    };
    results[name] =
        Measured{med(&Measured::step_seconds), med(&Measured::mean_step_seconds), med(&Measured::ag_hidden),
                 med(&Measured::rs_hidden),    ms.back().tokens_per_step,         med(&Measured::all_to_all_seconds)};
  }
  return results;
}

// The markdown tables: FSDP scenarios against one rank, MoE's all-to-alls, and MXFP8 over TCP.
std::string results_tables(const std::vector<Scenario>& scenarios, const std::map<std::string, Measured>& results) {
  // Ratios against a scenario that --only left out read "-".
  auto ratio = [&](const Measured& m, const char* base, double (*of)(const Measured&)) -> std::string {
    return results.count(base) ? fixed(of(m) / of(results.at(base)), 2) + "x" : "-";
  };
  auto per_token = [](const Measured& m) { return m.step_seconds / static_cast<double>(m.tokens_per_step); };
  auto own_table = [](const Scenario& sc) { return sc.name.starts_with("MoE") || sc.name.starts_with("TCP"); };
  std::ostringstream md;
  if (std::any_of(scenarios.begin(), scenarios.end(), [&](const Scenario& sc) { return !own_table(sc); })) {
    md << "| scenario | ranks | step (ms, median) | us per token | vs 1 rank | all-gather hidden | reduce-scatter "
          "hidden | mean step (ms) | checkpoint cost per step |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
  }
  for (const auto& sc : scenarios) {
    if (own_table(sc)) continue;  // their own tables below
    const Measured& m = results.at(sc.name);
    const bool ckpt = sc.name.find("checkpoint") != std::string::npos;
    const char* plain = "FSDP 2 ranks, prefetch 1";
    md << "| " << sc.name << " | " << sc.world << " | " << fixed(1e3 * m.step_seconds, 2) << " | "
       << fixed(1e6 * per_token(m), 2) << " | " << ratio(m, "1 rank", per_token) << " | "
       << (sc.world > 1 ? fixed(100 * m.ag_hidden, 0) + "%" : "-") << " | "
       << (sc.world > 1 ? fixed(100 * m.rs_hidden, 0) + "%" : "-") << " | " << fixed(1e3 * m.mean_step_seconds, 2)
       << " | "
       << (ckpt && results.count(plain)
               ? signed_percent(m.mean_step_seconds / results.at(plain).mean_step_seconds - 1)
               : std::string("-"))
       << " |\n";
  }
  // MoE: the same global batch on the MoE debug flavor; the all-to-alls block the compute.
  if (std::any_of(scenarios.begin(), scenarios.end(), [](const Scenario& sc) { return sc.name.starts_with("MoE"); }))
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
  // Communication precision over TCP: step time against bf16 all-gathers and f32 reduce-scatters.
  if (std::any_of(scenarios.begin(), scenarios.end(), [](const Scenario& sc) { return sc.name.starts_with("TCP"); })) {
    md << "\n| scenario | ranks | step (ms, median) | vs bf16 / f32 on the wire | all-gather hidden | "
          "reduce-scatter hidden |\n"
       << "|---|---|---|---|---|---|\n";
  }
  for (const auto& sc : scenarios) {
    if (!sc.name.starts_with("TCP")) continue;
    const Measured& m = results.at(sc.name);
    md << "| " << sc.name << " | " << sc.world << " | " << fixed(1e3 * m.step_seconds, 2) << " | "
       << ratio(m, "TCP 2 ranks, bf16 all-gathers, f32 reduce-scatters", [](const Measured& x) { return x.step_seconds; })
       << " | " << fixed(100 * m.ag_hidden, 0) << "% | " << fixed(100 * m.rs_hidden, 0) << "% |\n";
  }
  return md.str();
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::model::use_best_blas_core(argv, /*announce=*/true);  // first: it may restart this program
  std::string config_file = "configs/debug_model.toml", markdown, only;
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
    } else if (a == "--only") {
      only = value();
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

  std::vector<Scenario> scenarios = all_scenarios();
  std::erase_if(scenarios, [&](const Scenario& sc) { return sc.name.find(only) == std::string::npos; });
  if (scenarios.empty()) usage("fsdp-train-bench: no scenario's name contains '" + only + "'");
  const fs::path scratch = fs::temp_directory_path() / ("fsdp_train_bench_" + std::to_string(::getpid()));
  std::map<std::string, Measured> results;
  try {
    results = run_repeats(scenarios, config_file, steps, repeats, scratch);
  } catch (const std::exception& e) {
    fs::remove_all(scratch);
    std::fprintf(stderr, "fsdp-train-bench: %s\n", e.what());
    return 1;
  }
  fs::remove_all(scratch);

  const std::string md = results_tables(scenarios, results);
  std::cout << md;
  if (!markdown.empty()) {
    std::ofstream out(markdown);
    out << md;
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
