// Constructing the backends fsdp-bench compares. A backend that cannot run here (a transport not
// built yet, mpi-native outside mpirun) comes back as a reason instead, printed in its table's place.
#pragma once

#include <memory>
#include <string>

#include "bench/fsdp_bench/backend.h"
#include "bench/fsdp_bench/options.h"
#include "launch/bootstrap.h"
#include "launch/world.h"

namespace fsdp::bench {

struct BackendContext {
  launch::ProcessEnv env;
  // The run's own job (transport auto), alive for the whole run: the memcpy bound's barrier and the
  // agreement on which backends every rank could start.
  Backend* control = nullptr;
  // Its rendezvous store (null in a 1-rank job with no master), where Gloo's ranks meet, under
  // keys starting with store_prefix.
  launch::KeyValueStore* store = nullptr;
  std::string store_prefix;
  // -R: bytes of each of the send and receive windows our backends allocate (0: no windows).
  size_t window_bytes = 0;
};

// The control job: our Communicator over connect_world's automatic transport choice.
std::unique_ptr<Backend> make_control_backend(const launch::ProcessEnv& env, launch::KeyValueStore** store,
                                              std::string* store_prefix);

struct MadeBackend {
  std::unique_ptr<Backend> backend;
  std::string unavailable;  // why, when backend is null
};

// shm, tcp, ucx, mpi: our Communicator over the transport of that name, connected by
// launch::connect_world (so transports added there are measured without changes here).
// mxfp8: all-gathers of bf16/f32 data travel as MXFP8 (quantise, all-gather the bytes, decode on
// arrival, all inside the timed call).
MadeBackend make_fsdp_backend(const std::string& transport, BackendContext& ctx, bool mxfp8 = false);
// Open MPI's own collectives (MPI_Allgather, ...); only under mpirun.
MadeBackend make_mpi_native_backend(BackendContext& ctx);
// Debian's libgloo: its algorithms over its TCP device on 127.0.0.1.
MadeBackend make_gloo_backend(BackendContext& ctx);

inline MadeBackend make_backend(const std::string& name, BackendContext& ctx) {
  if (name == "mpi-native") return make_mpi_native_backend(ctx);
  if (name == "gloo") return make_gloo_backend(ctx);
  if (is_mxfp8_backend(name)) return make_fsdp_backend(std::string(mxfp8_base(name)), ctx, true);
  return make_fsdp_backend(name, ctx);
}

// connect_world with the store keys under launch::job_key_prefix(suffix) ("fsdp/<FSDP_RUN_ID>.<suffix>/"):
// every job this process joins gets its own keys in a shared external store (fsdp-run's), so a second
// job never reads the first one's job id.
launch::World connect_world_as(const std::string& suffix, const launch::ProcessEnv& env, launch::WorldOptions options);

}  // namespace fsdp::bench
