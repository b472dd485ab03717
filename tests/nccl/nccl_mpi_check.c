/* NCCL's documented start-up under MPI, written only against nccl.h (and mpi.h for the id's
 * broadcast): rank 0 calls ncclGetUniqueId, MPI_Bcast sends the 128 bytes, every rank calls
 * ncclCommInitRank. Then every collective and a ring of grouped sends and receives, for float,
 * double, int32, bf16 (as uint16 bits), int8 and counts 0, 1, 7, 1000 and 100000, each checked against
 * values computed here. Exits 0 when everything matched; prints each mismatch with rank, call, type,
 * count and index.
 *
 *   mpirun -np 3 ./nccl-mpi-check            (FSDP_TRANSPORT=tcp to force the network transport)
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

typedef struct {
  ncclDataType_t type;
  const char* name;
  size_t size;
} TypeInfo;

static const TypeInfo kTypes[] = {
    {ncclFloat, "float", 4}, {ncclDouble, "double", 8}, {ncclInt32, "int32", 4},
    {ncclBfloat16, "bf16", 2}, {ncclInt8, "int8", 1},
};
static const size_t kCounts[] = {0, 1, 7, 1000, 100000};

/* Small integers: exact in every type (bf16 holds integers up to 256 exactly) and in every sum of
 * up to a few ranks (int8 included), so results compare exactly. Unique enough per rank and index
 * that a block landing in the wrong place shows. */
static double value(int rank, size_t i) { return (double)((int)((i * 7 + (size_t)rank * 13) % 21) - 10); }

static uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return (uint16_t)(u >> 16); /* exact for the small integers used here */
}

static float bf16_bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static void put(void* buf, const TypeInfo* t, size_t i, double v) {
  switch (t->type) {
    case ncclFloat: ((float*)buf)[i] = (float)v; break;
    case ncclDouble: ((double*)buf)[i] = v; break;
    case ncclInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case ncclBfloat16: ((uint16_t*)buf)[i] = float_to_bf16_bits((float)v); break;
    case ncclInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    default: abort();
  }
}

static double get(const void* buf, const TypeInfo* t, size_t i) {
  switch (t->type) {
    case ncclFloat: return ((const float*)buf)[i];
    case ncclDouble: return ((const double*)buf)[i];
    case ncclInt32: return ((const int32_t*)buf)[i];
    case ncclBfloat16: return bf16_bits_to_float(((const uint16_t*)buf)[i]);
    case ncclInt8: return ((const int8_t*)buf)[i];
    default: abort();
  }
}

/* Compares count elements of got with want(i); reports at most 3 mismatches per call. */
static void expect(const char* what, const TypeInfo* t, size_t count, const void* got, size_t n,
                   double (*want)(size_t, const void*), const void* ctx) {
  int shown = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = want(i, ctx), g = get(got, t, i);
    if (g != w) {
      ++g_failures;
      if (shown++ < 3) {
        fprintf(stderr, "rank %d: %s %s count %zu: element %zu is %g, expected %g\n", g_rank, what, t->name, count, i,
                g, w);
      }
    }
  }
}

/* Expected values; ctx carries the count (and, for send/recv, the peer). */
typedef struct {
  size_t count;
  int peer;
} Ctx;

static double want_all_gather(size_t i, const void* c) {
  const Ctx* ctx = (const Ctx*)c;
  return value((int)(i / ctx->count), i % ctx->count);
}
static double want_sum_at(size_t i) {
  double s = 0;
  for (int r = 0; r < g_size; ++r) s += value(r, i);
  return s;
}
static double want_max_at(size_t i) {
  double m = value(0, i);
  for (int r = 1; r < g_size; ++r) m = value(r, i) > m ? value(r, i) : m;
  return m;
}
static double want_reduce_scatter(size_t i, const void* c) {
  const Ctx* ctx = (const Ctx*)c;
  return want_sum_at((size_t)g_rank * ctx->count + i);
}
static double want_sum(size_t i, const void* c) {
  (void)c;
  return want_sum_at(i);
}
static double want_max(size_t i, const void* c) {
  (void)c;
  return want_max_at(i);
}
static double want_from_peer(size_t i, const void* c) { return value(((const Ctx*)c)->peer, i); }

static void fill(void* buf, const TypeInfo* t, int rank, size_t n) {
  for (size_t i = 0; i < n; ++i) put(buf, t, i, value(rank, i));
}

static void check_type_count(ncclComm_t comm, const TypeInfo* t, size_t count) {
  const int n = g_size;
  const size_t full = count * (size_t)n;
  /* +1 so count 0 still gets a valid pointer */
  char* send = malloc(full * t->size + 1);
  char* recv = malloc(full * t->size + 1);
  Ctx ctx = {count, 0};

  /* all-gather: rank r's block lands at offset r * count */
  fill(send, t, g_rank, count);
  memset(recv, 0x7f, full * t->size + 1);
  CHECK_NCCL(ncclAllGather(send, recv, count, t->type, comm, NULL));
  expect("all_gather", t, count, recv, full, want_all_gather, &ctx);

  /* reduce-scatter (sum): rank r gets block r of the sum over ranks */
  fill(send, t, g_rank, full);
  CHECK_NCCL(ncclReduceScatter(send, recv, count, t->type, ncclSum, comm, NULL));
  expect("reduce_scatter", t, count, recv, count, want_reduce_scatter, &ctx);

  /* all-reduce: sum out of place, max in place */
  fill(send, t, g_rank, count);
  CHECK_NCCL(ncclAllReduce(send, recv, count, t->type, ncclSum, comm, NULL));
  expect("all_reduce(sum)", t, count, recv, count, want_sum, &ctx);
  fill(recv, t, g_rank, count);
  CHECK_NCCL(ncclAllReduce(recv, recv, count, t->type, ncclMax, comm, NULL));
  expect("all_reduce(max, in place)", t, count, recv, count, want_max, &ctx);

  /* broadcast from the last rank */
  ctx.peer = n - 1;
  fill(send, t, g_rank, count);
  memset(recv, 0, count * t->size + 1);
  CHECK_NCCL(ncclBroadcast(send, recv, count, t->type, n - 1, comm, NULL));
  expect("broadcast", t, count, recv, count, want_from_peer, &ctx);

  /* reduce (sum) to rank 1 % n; the others' recvbuff is NULL (only the root's is written) */
  const int root = 1 % n;
  fill(send, t, g_rank, count);
  CHECK_NCCL(ncclReduce(send, g_rank == root ? recv : NULL, count, t->type, ncclSum, root, comm, NULL));
  if (g_rank == root) expect("reduce", t, count, recv, count, want_sum, &ctx);

  /* a ring inside one group: send to the next rank, receive from the previous one */
  const int next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  ctx.peer = prev;
  fill(send, t, g_rank, count);
  memset(recv, 0, count * t->size + 1);
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(send, count, t->type, next, comm, NULL));
  CHECK_NCCL(ncclRecv(recv, count, t->type, prev, comm, NULL));
  CHECK_NCCL(ncclGroupEnd());
  expect("send/recv ring", t, count, recv, count, want_from_peer, &ctx);

  free(send);
  free(recv);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);

  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) {
    fprintf(stderr, "rank %d: ncclGetVersion %d != NCCL_VERSION_CODE %d\n", g_rank, version, NCCL_VERSION_CODE);
    ++g_failures;
  }

  ncclUniqueId id;
  if (g_rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, g_size, id, g_rank));

  int count = 0, rank = -1;
  CHECK_NCCL(ncclCommCount(comm, &count));
  CHECK_NCCL(ncclCommUserRank(comm, &rank));
  if (count != g_size || rank != g_rank) {
    fprintf(stderr, "rank %d: ncclCommCount %d / ncclCommUserRank %d, expected %d / %d\n", g_rank, count, rank, g_size,
            g_rank);
    ++g_failures;
  }

  for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
    for (size_t c = 0; c < sizeof(kCounts) / sizeof(kCounts[0]); ++c) check_type_count(comm, &kTypes[t], kCounts[c]);
  }

  /* A bad argument is an error code with text, and leaves the communicator usable. */
  float x = 1.0f;
  const ncclResult_t bad = ncclAllReduce(&x, &x, 1, (ncclDataType_t)42, ncclSum, comm, NULL);
  if (bad != ncclInvalidArgument || strstr(ncclGetLastError(comm), "invalid data type 42") == NULL) {
    fprintf(stderr, "rank %d: invalid type gave %d '%s'\n", g_rank, (int)bad, ncclGetLastError(comm));
    ++g_failures;
  }
  ncclResult_t async = ncclInternalError;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) {
    fprintf(stderr, "rank %d: async error %d after a bad argument\n", g_rank, (int)async);
    ++g_failures;
  }
  CHECK_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  if (x != (float)g_size) {
    fprintf(stderr, "rank %d: all_reduce after the error gave %g\n", g_rank, x);
    ++g_failures;
  }

  CHECK_NCCL(ncclCommFinalize(comm));
  CHECK_NCCL(ncclCommDestroy(comm));

  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    printf("nccl-mpi-check %s: %d ranks, %d mismatches\n", total == 0 ? "OK" : "FAILED", g_size, total);
  }
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}
