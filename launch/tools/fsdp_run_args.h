// fsdp-run's command line (fsdp_run.cc has the whole story; docs/launch.md every option).
#pragma once

#include <string>
#include <vector>

namespace fsdp::launch::run {

struct Args {
  int nproc = 0;  // ranks on this node
  // torchrun's multi-node flags: node `node_rank` of `nnodes` starts ranks node_rank * nproc + [0, nproc)
  // of nnodes * nproc; node 0's fsdp-run serves the store on --master-addr:--master-port.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool tag_output = true;
  bool serve_store = true;
  bool bind_to_core = false;  // --bind-to core: local rank r on the r-th CPU fsdp-run may use
  // --max-restarts K (torchrun's): after a rank fails, stop every rank and start the whole job again, at
  // most K times; across nodes the launchers agree on each restart through node 0's store.
  int max_restarts = 0;
  // --replace-lost K: in fault-tolerance mode, start a replacement for a lost rank (same RANK,
  // FSDP_FT_JOIN=1) once the survivors went on without it; at most K replacements in all.
  int replace_lost = 0;
  std::vector<std::string> command;

  int world_size() const { return nnodes * nproc; }
  int first_rank() const { return node_rank * nproc; }
  bool multi_node() const { return nnodes > 1; }
};

// Prints `error` (when not empty) and the usage, then exits: 0 for --help, 2 for an error.
[[noreturn]] void usage(const std::string& error);

// The options, then the program and its arguments (after "--", or from the first word that is not an
// option). Anything malformed ends the process through usage().
Args parse(int argc, char** argv);

}  // namespace fsdp::launch::run
