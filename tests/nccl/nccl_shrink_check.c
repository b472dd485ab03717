/* ncclCommShrink and ncclCommGetAsyncError from C99, without mpirun: this process forks the ranks,
 * then makes the unique id (its listener serves the rendezvous, so any rank may die) and hands it to
 * each rank through a pipe.
 *
 *   nccl-shrink-check kill N V     rank V dies by SIGKILL; the others see ncclCommGetAsyncError turn
 *                                  ncclRemoteError naming it (no operation posted), shrink with
 *                                  NCCL_SHRINK_ABORT and check an all-reduce and an all-gather
 *   nccl-shrink-check killop N V   the same, but the survivors learn it from an all-reduce that fails
 *   nccl-shrink-check live N E     no failure: every rank but E shrinks with NCCL_SHRINK_DEFAULT; E
 *                                  only destroys its communicator
 *
 * Exit 0 when every surviving rank passed and the victim died by SIGKILL; rank failures print why. */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kMaxRanks = 8, kSmall = 1000, kLarge = 1 << 18 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int fail(int rank, const char* what, ncclResult_t r, ncclComm_t comm) {
  fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, ncclGetErrorString(r), ncclGetLastError(comm));
  return 1;
}

/* Sums and gathers values unique to rank and index, checked against what every rank computes alone. */
static int check_collectives(int rank, ncclComm_t comm, int n, int me) {
  static float send[kLarge], recv[kLarge];
  static int gathered[kMaxRanks * kSmall];
  int mine[kSmall];
  const size_t counts[2] = {kSmall, kLarge};
  for (int c = 0; c < 2; ++c) {
    for (size_t i = 0; i < counts[c]; ++i) send[i] = (float)((me + 1) * 1000 + (int)(i % 512));
    ncclResult_t r = ncclAllReduce(send, recv, counts[c], ncclFloat, ncclSum, comm, NULL);
    if (r != ncclSuccess) return fail(rank, "ncclAllReduce on the shrunk communicator", r, comm);
    for (size_t i = 0; i < counts[c]; ++i) {
      const float want = (float)(1000 * n * (n + 1) / 2 + n * (int)(i % 512));
      if (recv[i] != want) {
        fprintf(stderr, "rank %d: all-reduce element %zu of %zu is %g, not %g\n", rank, i, counts[c], recv[i], want);
        return 1;
      }
    }
  }
  for (int i = 0; i < kSmall; ++i) mine[i] = me * 100000 + i;
  ncclResult_t r = ncclAllGather(mine, gathered, kSmall, ncclInt32, comm, NULL);
  if (r != ncclSuccess) return fail(rank, "ncclAllGather on the shrunk communicator", r, comm);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < kSmall; ++i) {
      if (gathered[j * kSmall + i] != j * 100000 + i) {
        fprintf(stderr, "rank %d: all-gather block %d element %d is %d\n", rank, j, i, gathered[j * kSmall + i]);
        return 1;
      }
    }
  }
  return 0;
}

/* The survivors' shrink, and the shrunk communicator's size, rank and collectives. */
static int shrink_and_check(int rank, int nranks, ncclComm_t comm, int excluded, int flags) {
  ncclComm_t shrunk = NULL;
  ncclResult_t r = ncclCommShrink(comm, &excluded, 1, &shrunk, NULL, flags);
  if (r != ncclSuccess) return fail(rank, "ncclCommShrink", r, comm);
  /* As NCCL's recovery does after NCCL_SHRINK_ABORT: the parent goes, the shrunk one carries on. */
  if (flags == NCCL_SHRINK_ABORT && (r = ncclCommAbort(comm)) != ncclSuccess) return fail(rank, "abort", r, NULL);
  int n = 0, me = -1;
  if (ncclCommCount(shrunk, &n) != ncclSuccess || ncclCommUserRank(shrunk, &me) != ncclSuccess) return 1;
  if (n != nranks - 1 || me != rank - (rank > excluded)) {
    fprintf(stderr, "rank %d: shrunk to rank %d of %d\n", rank, me, n);
    return 1;
  }
  if (check_collectives(rank, shrunk, n, me) != 0) return 1;
  /* The dead rank's loss stays with the parent: the shrunk communicator's peers all look alive. */
  ncclResult_t async = ncclInternalError;
  if (ncclCommGetAsyncError(shrunk, &async) != ncclSuccess || async != ncclSuccess) {
    return fail(rank, "the shrunk communicator reports an error", async, shrunk);
  }
  if ((r = ncclCommDestroy(shrunk)) != ncclSuccess) return fail(rank, "destroy shrunk", r, NULL);
  if (flags == NCCL_SHRINK_DEFAULT && (r = ncclCommDestroy(comm)) != ncclSuccess) return fail(rank, "destroy", r, NULL);
  return 0;
}

/* After the victim died: the survivors learn it (from ncclCommGetAsyncError alone, or from a failed
 * all-reduce) with ncclRemoteError and a text naming the victim. */
static int see_the_loss(int rank, ncclComm_t comm, int victim, int through_op) {
  ncclResult_t async = ncclSuccess;
  if (through_op) {
    static float big[kLarge];
    async = ncclAllReduce(big, big, kLarge, ncclFloat, ncclSum, comm, NULL);
  } else {
    const double deadline = now_s() + 60;
    while (async == ncclSuccess && now_s() < deadline) {
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return fail(rank, "ncclCommGetAsyncError", async, comm);
      if (async == ncclSuccess) sleep_ms(1);
    }
  }
  if (async != ncclRemoteError) return fail(rank, "the lost peer was not reported as ncclRemoteError", async, comm);
  char needle[32];
  snprintf(needle, sizeof(needle), "rank %d", victim);
  if (!strstr(ncclGetLastError(comm), needle)) {
    fprintf(stderr, "rank %d: '%s' missing from: %s\n", rank, needle, ncclGetLastError(comm));
    return 1;
  }
  ncclResult_t later = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &later) != ncclSuccess || later != ncclRemoteError) {
    fprintf(stderr, "rank %d: ncclCommGetAsyncError says %d after the loss\n", rank, (int)later);
    return 1;
  }
  return 0;
}

static int run_rank(const char* mode, int rank, int nranks, int target, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) return fail(rank, "ncclCommInitRank", r, NULL);
  float x = 1;
  if ((r = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL)) != ncclSuccess || x != (float)nranks) {
    return fail(rank, "the first all-reduce", r, comm);
  }
  if (strcmp(mode, "live") == 0) {
    if (rank == target) return ncclCommDestroy(comm) == ncclSuccess ? 0 : fail(rank, "destroy", r, NULL);
    return shrink_and_check(rank, nranks, comm, target, NCCL_SHRINK_DEFAULT);
  }
  if (rank == target) raise(SIGKILL);
  if (see_the_loss(rank, comm, target, strcmp(mode, "killop") == 0) != 0) return 1;
  return shrink_and_check(rank, nranks, comm, target, NCCL_SHRINK_ABORT);
}

/* Waits for every rank (killing all after 120 s): 0 when the victim died by SIGKILL and the rest exited 0. */
static int reap(const pid_t* pids, int nranks, int victim) {
  int bad = 0, left = nranks;
  int done[kMaxRanks] = {0};
  const double deadline = now_s() + 120;
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      int status = 0;
      if (done[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = 1;
      --left;
      const int want_kill = r == victim;
      if (want_kill ? !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                    : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "rank %d ended with status 0x%x\n", r, status);
        bad = 1;
      }
    }
    if (left > 0 && now_s() > deadline) {
      fprintf(stderr, "ranks still running after 120 s: killing them\n");
      for (int r = 0; r < nranks; ++r) {
        if (!done[r]) kill(pids[r], SIGKILL);
      }
      return 1;
    }
    sleep_ms(2);
  }
  return bad;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s kill|killop|live NRANKS RANK\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const int nranks = atoi(argv[2]), target = atoi(argv[3]);
  if (nranks < 2 || nranks > kMaxRanks || target < 0 || target >= nranks) return 2;
  pid_t pids[kMaxRanks];
  int pipes[kMaxRanks][2];
  /* Fork before any NCCL call: the ranks start single-threaded, with nothing of the library in them. */
  for (int r = 0; r < nranks; ++r) {
    if (pipe(pipes[r]) != 0) return 3;
    pids[r] = fork();
    if (pids[r] < 0) return 3;
    if (pids[r] == 0) {
      ncclUniqueId id;
      close(pipes[r][1]);
      if (read(pipes[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(4);
      close(pipes[r][0]);
      _exit(run_rank(mode, r, nranks, target, id));
    }
    close(pipes[r][0]);
  }
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  for (int k = 0; k < nranks; ++k) {
    if (r == ncclSuccess && write(pipes[k][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) fprintf(stderr, "pipe\n");
    close(pipes[k][1]);
  }
  const int bad = reap(pids, nranks, strcmp(mode, "live") == 0 ? -1 : target);
  if (r != ncclSuccess || bad) {
    fprintf(stderr, "FAILED (%s %d %d)\n", mode, nranks, target);
    return 1;
  }
  printf("ok: %s, %d ranks, rank %d\n", mode, nranks, target);
  return 0;
}
