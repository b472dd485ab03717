// MPI transport over MPI point-to-point (MPI stays out of this header: link fsdp_transport_mpi), for
// a job started by mpirun. One MPI process per rank.
//
// Threads: the progress engine's thread makes the MPI calls, not the thread that initialised MPI, so
// the transport needs MPI_THREAD_SERIALIZED (MPI_THREAD_FUNNELED would confine MPI to the main
// thread). If MPI is not initialised yet, the transport calls MPI_Init_thread(SERIALIZED) itself and
// MPI_Finalize at exit; a program that initialised MPI must have asked for SERIALIZED, or MULTIPLE
// when it makes MPI calls of its own while communicators are running, and must destroy the
// communicators before its MPI_Finalize.
//
// The transport works on its own duplicate of MPI_COMM_WORLD (MPI_Comm_idup), so no message of the
// program's can match ours, and renumbers MPI ranks to the job's ranks. Control messages (carrying
// the full 128-bit Tag, see fabric_transport.h) use MPI tag 0; each large payload moves under an MPI
// tag in [1, MPI_TAG_UB] that the receiver chose, split into messages of at most max_message_bytes
// (MPI counts are int).
//
// Liveness: Open MPI without ULFM reports no dead peers. The ranks exchange process identities at
// start-up, so a rank on the same kernel notices a peer that died within the engine's 100 ms check;
// a peer elsewhere is noticed by mpirun, which then ends the job, or by the operation's timeout.
// After a lost peer the transport does not call MPI_Finalize at exit (it would wait for the dead).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "collectives/transports/transport.h"

namespace fsdp {

struct MpiOptions {
  // Largest single MPI message; larger payloads are sent as several under one tag (MPI keeps them in
  // order). 1 GiB keeps every count far from INT_MAX; tests lower it to exercise the split.
  size_t max_message_bytes = size_t{1} << 30;
};

// Joins the MPI job as `rank` of `size` (this job's numbering; -1, -1: MPI_COMM_WORLD's). Throws
// InvalidArgument when not started by an MPI launcher, when MPI_COMM_WORLD's size differs from
// `size`, or MPI's thread level is too low; TimeoutError when not every process joined in
// `connect_timeout`.
std::shared_ptr<Transport> make_mpi_transport(int rank, int size, std::chrono::milliseconds connect_timeout,
                                              MpiOptions options = {});

}  // namespace fsdp
