/* Uses the installed nccl.h and library: three in-process ranks (ncclCommInitAll) all-reducing in one
 * group, then a one-rank job through ncclGetUniqueId and ncclCommInitRank. Prints "consumer OK". */
#include <nccl.h>
#include <stdio.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s: %s: %s\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));    \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main(void) {
  ncclComm_t comms[3];
  float in[3] = {1.0f, 2.0f, 4.0f}, out[3] = {0, 0, 0};
  int r;
  CHECK(ncclCommInitAll(comms, 3, NULL));
  CHECK(ncclGroupStart());
  for (r = 0; r < 3; ++r) CHECK(ncclAllReduce(&in[r], &out[r], 1, ncclFloat, ncclSum, comms[r], NULL));
  CHECK(ncclGroupEnd());
  for (r = 0; r < 3; ++r) {
    if (out[r] != 7.0f) {
      fprintf(stderr, "rank %d: all-reduce gave %g, expected 7\n", r, out[r]);
      return 1;
    }
    CHECK(ncclCommDestroy(comms[r]));
  }

  ncclUniqueId id;
  ncclComm_t one;
  double x = 3.0;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&one, 1, id, 0));
  CHECK(ncclAllReduce(&x, &x, 1, ncclDouble, ncclSum, one, NULL));
  CHECK(ncclCommDestroy(one));
  if (x != 3.0) return 1;

  int version = 0;
  CHECK(ncclGetVersion(&version));
  printf("consumer OK (NCCL API %d)\n", version);
  return 0;
}
