#include "launch/tools/fsdp_run_args.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace fsdp::launch::run {
namespace {

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) {
    usage(flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'");
  }
  return static_cast<int>(v);
}

}  // namespace

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fsdp-run: %s\n", error.c_str());
  std::fprintf(
      stderr,
      "usage: fsdp-run --nproc N [--nnodes M --node-rank K] [--master-addr A] [--master-port P (0: a free "
      "port)] [--tag-output|--no-tag-output] [--no-store] [--bind-to core|none] [--max-restarts K] [--replace-lost K] "
      "-- "
      "PROGRAM ARGS...\n"
      "  sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each child;\n"
      "  --nnodes M --node-rank K: run this on each of M hosts (K = 0..M-1, as torchrun): ranks K*N..K*N+N-1\n"
      "  of M*N; node 0's fsdp-run serves the store on --master-addr:--master-port (both required), the\n"
      "  others connect to it; every node needs the same FSDP_JOB_SECRET or FSDP_JOB_SECRET_FILE; a rank\n"
      "  failing on any node stops every node\n"
      "  --bind-to core pins rank r to the r-th CPU of fsdp-run's affinity (as mpirun --bind-to core;\n"
      "  refused when there are more ranks than CPUs); default none\n"
      "  --max-restarts K: when a rank fails, stop every rank and start the job again (at most K times; each\n"
      "  start's ranks see FSDP_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT); default 0; across nodes every\n"
      "  fsdp-run needs the same K\n"
      "  --replace-lost K: when the ranks run with fault tolerance (fsdp-train --fault_tolerance.enable true)\n"
      "  and one is lost, start a replacement with the same RANK and FSDP_FT_JOIN=1 once the others went on\n"
      "  without it; it joins the running job at a step boundary (at most K replacements; one node only)\n"
      "  FSDP_RUN_GRACE_SEC (default 5): SIGTERM to SIGKILL; FSDP_RUN_TERM_DELAY_SEC (default 1): how long\n"
      "  the others may fail on their own after a rank failed before they get SIGTERM\n");
  std::exit(error.empty() ? 0 : 2);
}

Args parse(int argc, char** argv) {
  Args a;
  bool master_addr_given = false;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) usage(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string k = argv[i];
    std::optional<std::string> inline_value;
    if (k.rfind("--", 0) == 0 && k.find('=') != std::string::npos) {
      inline_value = k.substr(k.find('=') + 1);
      k = k.substr(0, k.find('='));
    }
    auto v = [&] { return inline_value ? *inline_value : value(k); };
    if (k == "--") {
      ++i;
      break;
    } else if (k == "--nproc" || k == "--nproc-per-node" || k == "--nproc_per_node") {
      a.nproc = parse_int(k, v(), 1, 4096);
    } else if (k == "--nnodes") {
      a.nnodes = parse_int(k, v(), 1, 4096);
    } else if (k == "--node-rank" || k == "--node_rank") {
      a.node_rank = parse_int(k, v(), 0, 4095);
    } else if (k == "--master-addr" || k == "--master_addr") {
      a.master_addr = v();
      master_addr_given = true;
    } else if (k == "--master-port" || k == "--master_port") {
      a.master_port = parse_int(k, v(), 0, 65535);
    } else if (k == "--tag-output") {
      a.tag_output = true;
    } else if (k == "--no-tag-output") {
      a.tag_output = false;
    } else if (k == "--no-store") {
      a.serve_store = false;
    } else if (k == "--max-restarts" || k == "--max_restarts") {
      a.max_restarts = parse_int(k, v(), 0, 1000000);
    } else if (k == "--replace-lost" || k == "--replace_lost") {
      a.replace_lost = parse_int(k, v(), 0, 1000000);
    } else if (k == "--bind-to" || k == "--bind_to") {
      const std::string what = v();
      if (what != "core" && what != "none") usage("--bind-to wants core or none, got '" + what + "'");
      a.bind_to_core = what == "core";
    } else if (k == "-h" || k == "--help") {
      usage("");
    } else if (k.rfind("-", 0) == 0) {
      usage("unknown option '" + k + "'");
    } else {
      break;  // the program, without "--"
    }
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  if (a.nproc < 1) usage("--nproc N is required");
  if (a.command.empty()) usage("no program given (fsdp-run --nproc N -- PROGRAM ARGS...)");
  if (a.node_rank >= a.nnodes) {
    usage("--node-rank " + std::to_string(a.node_rank) + " is outside [0, --nnodes " + std::to_string(a.nnodes) + ")");
  }
  if (a.multi_node() && (a.master_port == 0 || !master_addr_given)) {
    usage("--nnodes " + std::to_string(a.nnodes) +
          " needs --master-addr (node 0's address, reachable from every node) and --master-port (not 0): every "
          "node must name the same store");
  }
  if (a.replace_lost > 0 && (a.multi_node() || !a.serve_store)) {
    usage("--replace-lost works on one node whose fsdp-run serves the store (fault tolerance's mode)");
  }
  if (a.multi_node() && !a.serve_store) usage("--no-store works on one node only: node 0's fsdp-run serves the store");
  return a;
}

}  // namespace fsdp::launch::run
