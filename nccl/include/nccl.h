/* The NCCL-compatible C API of the FSDP runtime (libfsdp_nccl, also installed as libnccl).
 *
 * Source-compatible with NVIDIA's nccl.h of NCCL 2.28: the same functions, signatures, enum values,
 * constants and ncclConfig_t layout, so code written against NCCL builds against this header unchanged
 * and runs on CPU buffers. Plain C99 or C++; CUDA is not needed. When cuda_runtime.h was included
 * first, cudaStream_t is CUDA's own type; otherwise it is declared here as the same opaque pointer
 * type (struct CUstream_st *), so including cuda_runtime.h afterwards redeclares it compatibly (C11, C++).
 *
 * Semantics (docs/nccl_api.md has the details):
 *   - buffers are host memory; the stream argument is accepted and ignored;
 *   - outside a group every operation has completed when its call returns;
 *   - between ncclGroupStart and ncclGroupEnd operations are queued and complete at the outermost
 *     ncclGroupEnd; sends and receives in one group never deadlock each other;
 *   - errors are returned as ncclResult_t codes; ncclGetLastError gives the text, naming the rank, the
 *     peer and the operation. Nothing aborts the process.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

/* Lets code tell this implementation from NVIDIA's. */
#define FSDP_NCCL 1

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX ""
/* Versions up to 2.8 were encoded as X*1000 + Y*100 + Z, later ones as X*10000 + Y*100 + Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#if !defined(__CUDA_RUNTIME_H__) && !defined(CUDART_VERSION)
/* No CUDA runtime: an opaque handle of the type CUDA itself uses, never dereferenced. */
typedef struct CUstream_st* cudaStream_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* Produced by ncclGetUniqueId and passed unchanged to every rank's ncclCommInitRank. It carries the
 * address of the rendezvous listener and a random job id; it is plain bytes, safe to copy or send. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* never returned here: there is no CUDA */
  ncclSystemError = 2,        /* a system call or a resource failed (socket, memory, shared memory) */
  ncclInternalError = 3,      /* a bug in the library */
  ncclInvalidArgument = 4,    /* a bad value: null buffer, rank or peer out of range, unknown type or op */
  ncclInvalidUsage = 5,       /* a wrong call sequence: a destroyed or aborted communicator, unbalanced groups */
  ncclRemoteError = 6,        /* a peer died, closed its connection, or did not answer before the timeout */
  ncclInProgress = 7,         /* nonblocking calls only; never returned here (every call blocks) */
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator options. Fill it from NCCL_CONFIG_INITIALIZER, then set fields. Only `blocking`
 * (0 is accepted and behaves as 1) and `commName` (shown in error messages) mean anything here; the
 * GPU tuning fields are accepted and ignored. The struct tag and layout are NCCL 2.28's. */
typedef struct ncclConfig_v22800 {
  size_t size;           /* set by the initializer */
  unsigned int magic;    /* set by the initializer */
  unsigned int version;  /* set by the initializer */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                          \
  {                                                                                                      \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),                  \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,      \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,      \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,      \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                                     \
  }

/* For ncclGroupSimulateEnd, which is not supported here (it returns ncclInvalidUsage). */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

/* Built-in reductions. Values from ncclNumOps up to ncclMaxRedOp are handles made by
 * ncclRedOpCreatePreMulSum, valid only on the communicator that made them. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4, /* sum divided by the number of ranks */
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,   /* raw bits: the high half of an IEEE float */
  ncclFloat8e4m3 = 10, /* OCP e4m3fn: no infinities, max 448 */
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where ncclRedOpCreatePreMulSum's scalar lives. Both are host memory here: HostImmediate is read
 * once by ncclRedOpCreatePreMulSum; Device is read again by every call that uses the op. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* --- Memory and version ----------------------------------------------------------------------- */

/* Host memory (malloc); any buffer works, these exist for code written against NCCL. */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
/* NCCL_VERSION_CODE of this library. */
ncclResult_t ncclGetVersion(int* version);

/* --- Communicators ---------------------------------------------------------------------------- */

/* Starts (once per process) the rendezvous listener and returns an id naming it and a fresh job. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
/* Collective over the nranks processes (or threads) passing the same id; blocks until all joined. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
/* Several ids are accepted; the first one carries the rendezvous. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
/* ndev ranks inside this process (threads of one process, joined by memory copies); devlist is
 * ignored and may be NULL. */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/* Collective over comm: ranks passing the same color form a new communicator ordered by key, then
 * by old rank. NCCL_SPLIT_NOCOLOR takes part and gets NULL. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
/* Called by every rank but the excluded ones (which may be dead), with the same list: they form
 * *newcomm, renumbered in rank order, without any message to anyone. NCCL_SHRINK_ABORT first fails what
 * the parent has in flight and leaves it broken (abort or destroy it after); NCCL_SHRINK_DEFAULT leaves
 * it as it was. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags);
/* Completes what is in flight and synchronizes the ranks' shutdown; then only Destroy is allowed. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
/* Frees the communicator (finalizing it first if that was not done). */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Fails whatever is in flight, frees the communicator and returns at once; safe after any error and
 * from another thread than the one blocked in an operation. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* Not supported: returns ncclInvalidUsage. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);

const char* ncclGetErrorString(ncclResult_t result);
/* The text of the last error of comm (or, for NULL, of the last error anywhere in the process). The
 * pointer stays valid until this thread calls ncclGetLastError again. */
const char* ncclGetLastError(ncclComm_t comm);
/* ncclSuccess, or the error that broke comm (an operation failed on a peer, a timeout, or a peer found
 * lost by this call: ncclRemoteError naming it in ncclGetLastError): such a communicator must be
 * aborted, or shrunk without the lost peer. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
/* There is no device: *device is -1. */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

/* Registration is a no-op (host buffers need none); the handle is the buffer. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
/* Not supported: return ncclInvalidUsage. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* --- Reduction operators ---------------------------------------------------------------------- */

/* A sum in which every input is first multiplied by *scalar (a value of datatype). */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* --- Collectives (counts are elements; in place when the documented pointers are equal) -------- */

/* recvbuff of the root receives the reduction of every rank's sendbuff. */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
/* In-place broadcast of buff from root. */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* sendbuff holds nranks blocks of recvcount; rank r receives the reduction of block r. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* recvbuff receives nranks blocks of sendcount, rank r's at offset r * sendcount. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
/* count elements per pair of ranks: block j of sendbuff goes to rank j, block i of recvbuff is rank i's. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);

/* --- Point to point: matched in call order per pair of ranks ---------------------------------- */

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

/* --- Groups: per thread, nestable; operations complete at the outermost ncclGroupEnd ----------- */

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
/* Not supported: returns ncclInvalidUsage. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
