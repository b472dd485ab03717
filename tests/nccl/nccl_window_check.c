/* NCCL's registration entry points from a C program under mpirun (C99, only nccl.h and mpi.h):
 * ncclMemAlloc'd buffers registered with ncclCommWindowRegister, then an in-place all-gather, an
 * out-of-place reduce-scatter and an in-place all-reduce over them, float and bf16 (as uint16 bits),
 * each checked against values computed here; ncclCommWindowDeregister and ncclMemFree; finally a
 * malloc'd buffer, which has no file a peer could map, must be refused on every rank. Exits 0 when
 * all of that held; prints each mismatch with rank, call and index.
 *
 *   mpirun -np 2 ./nccl-window-check
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

/* Small integers: exact in fp32 and bf16 and in their sums over a few ranks. */
static float value(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 21) - 10); }

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static void put(void* buf, int bf16, size_t i, float v) {
  if (bf16) {
    ((uint16_t*)buf)[i] = to_bf16(v);
  } else {
    ((float*)buf)[i] = v;
  }
}

static float get(const void* buf, int bf16, size_t i) {
  return bf16 ? from_bf16(((const uint16_t*)buf)[i]) : ((const float*)buf)[i];
}

static void expect(const char* what, int bf16, size_t i, float got, float want) {
  if (got == want) return;
  if (g_failures++ < 10) {
    fprintf(stderr, "rank %d: %s %s element %zu is %g, expected %g\n", g_rank, what, bf16 ? "bf16" : "float", i,
            (double)got, (double)want);
  }
}

static void check_type(ncclComm_t comm, int bf16) {
  const size_t count = 100000; /* per rank */
  const size_t n = (size_t)g_size, elem = bf16 ? 2 : 4;
  const ncclDataType_t type = bf16 ? ncclBfloat16 : ncclFloat;
  void *full = NULL, *out = NULL;
  CHECK_NCCL(ncclMemAlloc(&full, n * count * elem));
  CHECK_NCCL(ncclMemAlloc(&out, count * elem));
  ncclWindow_t full_win = NULL, out_win = NULL;
  CHECK_NCCL(ncclCommWindowRegister(comm, full, n * count * elem, &full_win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_NCCL(ncclCommWindowRegister(comm, out, count * elem, &out_win, NCCL_WIN_DEFAULT));

  /* all-gather in place: this rank's block of `full`, gathered into all of it */
  char* mine = (char*)full + (size_t)g_rank * count * elem;
  for (size_t i = 0; i < count; ++i) put(mine, bf16, i, value(g_rank, i));
  CHECK_NCCL(ncclAllGather(mine, full, count, type, comm, NULL));
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) expect("ncclAllGather", bf16, r * count + i, get(full, bf16, r * count + i), value((int)r, i));
  }

  /* reduce-scatter out of place: every rank's `full` (rank r's values at every index) summed */
  for (size_t i = 0; i < n * count; ++i) put(full, bf16, i, value(g_rank, i));
  CHECK_NCCL(ncclReduceScatter(full, out, count, type, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < g_size; ++r) want += value(r, (size_t)g_rank * count + i);
    expect("ncclReduceScatter", bf16, i, get(out, bf16, i), want);
  }

  /* all-reduce in place */
  for (size_t i = 0; i < n * count; ++i) put(full, bf16, i, value(g_rank, i));
  CHECK_NCCL(ncclAllReduce(full, full, n * count, type, ncclSum, comm, NULL));
  for (size_t i = 0; i < n * count; ++i) {
    float want = 0;
    for (int r = 0; r < g_size; ++r) want += value(r, i);
    expect("ncclAllReduce", bf16, i, get(full, bf16, i), want);
  }

  CHECK_NCCL(ncclCommWindowDeregister(comm, full_win));
  CHECK_NCCL(ncclCommWindowDeregister(comm, out_win));
  CHECK_NCCL(ncclMemFree(full));
  CHECK_NCCL(ncclMemFree(out));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  ncclUniqueId id;
  if (g_rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, g_size, id, g_rank));

  check_type(comm, 0);
  check_type(comm, 1);

  /* Memory ncclMemAlloc did not return cannot be a window: every rank is refused (the registration
   * is collective, so the ranks fail together instead of waiting for each other). */
  void* plain = malloc(4096);
  ncclWindow_t win = NULL;
  const ncclResult_t refused = ncclCommWindowRegister(comm, plain, 4096, &win, NCCL_WIN_DEFAULT);
  if (refused == ncclSuccess || win != NULL) {
    fprintf(stderr, "rank %d: ncclCommWindowRegister of malloc'd memory succeeded\n", g_rank);
    ++g_failures;
  }
  free(plain);
  ncclCommAbort(comm);

  int failures = g_failures, total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) printf("nccl-window-check: %d ranks, %d failures\n", g_size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
