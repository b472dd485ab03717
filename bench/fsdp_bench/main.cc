// fsdp-bench: collective bandwidth and latency in nccl-tests' format, with our transports, Open MPI
// and Gloo side by side in one run, and the memcpy bound measured in the same run.
//
//   mpirun -np 2 --bind-to core build/bench/fsdp-bench all_gather -b 1K -e 64M -f 4 --backend all
//   build/launch/fsdp-run --nproc 2 -- build/bench/fsdp-bench all_reduce -b 8 -e 8 -n 1000 -z 1
//
// docs/benchmarks.md explains the columns, the JSON schema and the standard comparison (make bench).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/fsdp_bench/backends.h"
#include "bench/fsdp_bench/options.h"
#include "bench/fsdp_bench/plot.h"
#include "bench/fsdp_bench/report.h"
#include "bench/fsdp_bench/runner.h"
#include "collectives/types/errors.h"
#include "launch/bootstrap.h"

namespace fb = fsdp::bench;

namespace {

std::string command_line(int argc, char** argv) {
  std::string out = "fsdp-bench";
  for (int i = 1; i < argc; ++i) out += std::string(" ") + argv[i];
  return out;
}

// Every rank's pid, host and CPUs, gathered through the control job's store for the preamble.
std::vector<fb::RankInfo> gather_ranks(const fb::BackendContext& ctx, int rank, int n) {
  fb::RankInfo me{rank, static_cast<int>(::getpid()), fb::this_machine().hostname, fb::cpu_affinity()};
  if (!ctx.store || n == 1) return {me};
  const std::string key = ctx.store_prefix + "bench/rank/";
  ctx.store->set(key + std::to_string(rank), std::to_string(me.pid) + " " + me.cpus + " " + me.host);
  std::vector<fb::RankInfo> all;
  if (rank != 0) return all;
  for (int r = 0; r < n; ++r) {
    const std::string v = ctx.store->get(key + std::to_string(r));
    fb::RankInfo k{r, 0, "", ""};
    const auto a = v.find(' '), b = v.find(' ', a + 1);
    k.pid = std::stoi(v.substr(0, a));
    k.cpus = v.substr(a + 1, b - a - 1);
    k.host = v.substr(b + 1);
    all.push_back(k);
  }
  return all;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

int run(const fb::Options& o, const std::string& command) {
  fb::BackendContext ctx;
  ctx.env = fsdp::launch::detect_process_env(o.launch.overrides);
  std::unique_ptr<fb::Backend> control = fb::make_control_backend(ctx.env, &ctx.store, &ctx.store_prefix);
  ctx.control = control.get();
  const int rank = control->rank(), n = control->size();
  if (o.registration > 0) ctx.window_bytes = fb::buffer_bytes(o, n);
  const bool printer = rank == 0;

  fb::Report report;
  report.command = command;
  report.options = o;
  report.nranks = n;
  report.machine = fb::this_machine();
  report.ranks = gather_ranks(ctx, rank, n);
  if (printer) {
    std::fputs(fb::format_preamble(report).c_str(), stdout);
    std::fflush(stdout);
  }

  fb::Buffers buffers(fb::buffer_bytes(o, n), o.huge_pages);
  // Starts a backend where every rank can (a backend runs only where all could start it).
  auto start = [&](const std::string& name, fb::BackendInfo& info) {
    fb::MadeBackend made = fb::make_backend(name, ctx);
    double ok = made.backend ? 1 : 0;
    control->combine(&ok, 1, fb::Backend::Combine::kMin);
    if (made.backend && ok == 0) {
      made.backend.reset();
      made.unavailable = "another rank could not start it";
    }
    info = {name, made.backend ? made.backend->describe() : "", made.backend ? "" : made.unavailable};
    return std::move(made.backend);
  };
  std::map<std::string, fb::BackendInfo> infos;
  // The mpi transport's engine thread calls MPI, which Open MPI's own collectives must never meet
  // (MPI_THREAD_SERIALIZED): with both asked for, it runs on its own first and its job ends.
  const bool both_mpi = std::count(o.backends.begin(), o.backends.end(), "mpi-native") > 0;
  std::vector<std::unique_ptr<fb::Backend>> alive;
  for (const std::string& name : o.backends) {
    if (name != "mpi" || !both_mpi) continue;
    if (auto b = start(name, infos[name])) {
      auto rows = fb::run_interleaved(o, {b.get()}, nullptr, buffers);
      report.rows.insert(report.rows.end(), rows.begin(), rows.end());
    }
  }
  // The rest live together and take turns row by row with the memcpy bound.
  for (const std::string& name : o.backends) {
    if (name == "mpi" && both_mpi) continue;
    if (auto b = start(name, infos[name])) alive.push_back(std::move(b));
  }
  std::vector<fb::Backend*> turns;
  for (auto& b : alive) turns.push_back(b.get());
  auto rows = fb::run_interleaved(o, turns, o.memcpy_bound ? control.get() : nullptr, buffers);
  report.rows.insert(report.rows.end(), rows.begin(), rows.end());
  alive.clear();  // each job ends (a barrier, then teardown) before the tables print

  for (const std::string& name : o.backends) report.backends.push_back(infos[name]);
  if (o.memcpy_bound) {
    report.backends.push_back({"memcpy", "single-copy bound: memcpy of the bytes a rank receives (size x busbw "
                                         "factor), every rank at once; both columns are independent samples", ""});
    if (fb::has_reduction(o.collective)) {
      report.backends.push_back({fb::kAddBound, "reduction bound: x[i] += y[i] over the bytes a rank reduces (size x "
                                                "busbw factor), every rank at once, fp32/fp64 rows only", ""});
    }
  }
  if (printer) {
    for (const fb::BackendInfo& info : report.backends) std::fputs(fb::format_backend(report, info).c_str(), stdout);
  }

  long long wrong = 0;
  for (const fb::BackendInfo& b : report.backends) wrong += std::max(0LL, fb::summarize(report, b.name).wrong);
  if (printer) {
    if (!o.json_path.empty()) write_file(o.json_path, fb::format_json(report));
    if (!o.plot_path.empty()) write_file(o.plot_path, fb::plot_svg(report));
    std::fflush(stdout);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  fb::Options options;
  try {
    options = fb::parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const fb::HelpRequested&) {
    std::fputs(fb::usage().c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench: %s\n", e.what());
    return 2;
  }
  try {
    return run(options, command_line(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench: %s\n", e.what());
    return 1;
  }
}
