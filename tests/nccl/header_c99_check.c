/* Compiled as strict C99 (-std=c99 -Wpedantic): nccl.h is plain C, and its initializers and calls work
 * from C. nccl_api_test calls this; it returns the number of problems found. */
#include <nccl.h>
#include <string.h>

int nccl_c99_header_check(void) {
  int problems = 0;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclUniqueId id;
  ncclComm_t comm = NCCL_COMM_NULL;
  cudaStream_t stream = NULL;
  float x = 1.0f;
  if (config.size != sizeof(ncclConfig_t) || config.blocking != NCCL_CONFIG_UNDEF_INT || config.commName != NULL) {
    ++problems;
  }
  if (sim.size != sizeof(ncclSimInfo_t) || sim.estimatedTime != NCCL_UNDEF_FLOAT) ++problems;
  if (sizeof(id) != NCCL_UNIQUE_ID_BYTES) ++problems;
  if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return problems + 1;
  if (ncclAllReduce(&x, &x, 1, ncclFloat, ncclAvg, comm, stream) != ncclSuccess || x != 1.0f) ++problems;
  if (ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, NULL, stream) != ncclInvalidArgument) ++problems;
  if (strstr(ncclGetLastError(NULL), "comm is NULL") == NULL) ++problems;
  if (ncclCommDestroy(comm) != ncclSuccess) ++problems;
  return problems;
}
