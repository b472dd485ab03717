/* What the C programs run under mpirun share: this rank's place in the job, the failure count, and
 * CHECK_NCCL, which aborts the job naming the rank, the call and ncclGetLastError's text. */
#ifndef FSDP_TESTS_NCCL_MPI_CHECK_H
#define FSDP_TESTS_NCCL_MPI_CHECK_H

#include <mpi.h>
#include <nccl.h>
#include <stdio.h>

static int g_rank = 0, g_size = 1, g_failures = 0;

#define CHECK_NCCL(call)                                                                              \
  do {                                                                                                \
    ncclResult_t r_ = (call);                                                                         \
    if (r_ != ncclSuccess) {                                                                          \
      fprintf(stderr, "rank %d: %s failed: %s (%d): %s\n", g_rank, #call, ncclGetErrorString(r_), (int)r_, \
              ncclGetLastError(NULL));                                                                \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                   \
    }                                                                                                 \
  } while (0)

#endif
