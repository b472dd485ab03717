// The NCCL C API through its public header and shared library only: ncclCommInitAll jobs (ranks of one
// process driven from one thread inside groups, as NCCL's single-process examples do) checked against the
// collectives' naive reference; error codes and texts; group semantics; split; abort; async errors; and
// ncclCommInitRank's unique-id rendezvous with ranks as threads and as processes.
#include <gtest/gtest.h>
#include <nccl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/float_formats.h"
#include "tests/collectives/test_support.h"
#include "tests/nccl/init_all_job.h"

extern "C" int nccl_c99_header_check(void);  // header_c99_check.c

namespace {

using fsdp::DataType;
using fsdp::ReduceKind;
using fsdp::ReduceOp;
using fsdp::testing::compare;
using fsdp::testing::Job;
using fsdp::testing::make_input;
using fsdp::testing::reference_reduce;
using Bytes = std::vector<std::byte>;

ncclDataType_t nccl_type(DataType t) { return static_cast<ncclDataType_t>(static_cast<int>(t)); }

// The scalar s as one element of type t, for ncclRedOpCreatePreMulSum.
Bytes scalar_bytes(DataType t, double s) {
  Bytes b(fsdp::element_size(t));
  auto put = [&](auto v) { std::memcpy(b.data(), &v, sizeof(v)); };
  switch (t) {
    case DataType::kInt8: put(static_cast<int8_t>(s)); break;
    case DataType::kUint8: put(static_cast<uint8_t>(s)); break;
    case DataType::kInt32: put(static_cast<int32_t>(s)); break;
    case DataType::kUint32: put(static_cast<uint32_t>(s)); break;
    case DataType::kInt64: put(static_cast<int64_t>(s)); break;
    case DataType::kUint64: put(static_cast<uint64_t>(s)); break;
    case DataType::kFloat16: put(fsdp::float_to_half(static_cast<float>(s))); break;
    case DataType::kFloat32: put(static_cast<float>(s)); break;
    case DataType::kFloat64: put(s); break;
    case DataType::kBfloat16: put(fsdp::float_to_bf16(static_cast<float>(s))); break;
    case DataType::kFloat8E4M3: put(fsdp::float_to_e4m3(static_cast<float>(s))); break;
    case DataType::kFloat8E5M2: put(fsdp::float_to_e5m2(static_cast<float>(s))); break;
  }
  return b;
}

// The op for every rank: built in, or a premul-sum created on each communicator.
std::vector<ncclRedOp_t> make_ops(const Job& job, ReduceOp op, DataType t) {
  std::vector<ncclRedOp_t> ops(job.size(), static_cast<ncclRedOp_t>(static_cast<int>(op.kind)));
  if (op.kind != ReduceKind::kPremulSum) return ops;
  Bytes s = scalar_bytes(t, op.scalar);
  for (int r = 0; r < job.size(); ++r) {
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&ops[r], s.data(), nccl_type(t), ncclScalarHostImmediate, job[r]), ncclSuccess);
    EXPECT_GE(static_cast<int>(ops[r]), static_cast<int>(ncclNumOps));
  }
  return ops;
}

void destroy_ops(const Job& job, const std::vector<ncclRedOp_t>& ops) {
  for (int r = 0; r < job.size(); ++r) {
    if (ops[r] >= ncclNumOps) {
      EXPECT_EQ(ncclRedOpDestroy(ops[r], job[r]), ncclSuccess);
    }
  }
}

std::string tag(int n, DataType t, ReduceOp op, size_t count) {
  return "n=" + std::to_string(n) + " " + std::string(fsdp::name(t)) + " " + std::string(fsdp::name(op.kind)) +
         " count=" + std::to_string(count);
}

// --- Collectives of ncclCommInitAll jobs against the reference --------------------------------------

struct Case {
  int n;
  size_t count;
};

class InitAllCollectives : public ::testing::TestWithParam<Case> {};

TEST_P(InitAllCollectives, AllReduceEveryTypeAndOp) {
  const auto [n, count] = GetParam();
  Job job(n);
  for (DataType t : fsdp::testing::all_data_types()) {
    for (ReduceOp op : fsdp::testing::all_reduce_ops()) {
      std::vector<Bytes> in;
      for (int r = 0; r < n; ++r) in.push_back(make_input(t, op.kind, r, count));
      const Bytes want = reference_reduce(t, op, in, count);
      std::vector<Bytes> out(n, Bytes(count * fsdp::element_size(t)));
      const auto ops = make_ops(job, op, t);
      ASSERT_NCCL(ncclGroupStart());
      for (int r = 0; r < n; ++r) {
        ASSERT_NCCL(ncclAllReduce(in[r].data(), out[r].data(), count, nccl_type(t), ops[r], job[r], nullptr));
      }
      ASSERT_NCCL(ncclGroupEnd());
      destroy_ops(job, ops);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(compare(out[r].data(), want.data(), count, t), "") << tag(n, t, op, count) << " rank " << r;
      }
    }
  }
}

TEST_P(InitAllCollectives, ReduceScatterAllGatherBroadcastReduce) {
  const auto [n, count] = GetParam();
  Job job(n);
  const size_t full = count * n;
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32, DataType::kFloat8E4M3}) {
    const size_t elem = fsdp::element_size(t);
    for (ReduceOp op : {ReduceOp::sum(), ReduceOp{ReduceKind::kAvg, 1}, ReduceOp::premul_sum(2.0)}) {
      std::vector<Bytes> in;
      for (int r = 0; r < n; ++r) in.push_back(make_input(t, op.kind, r, full));
      const Bytes want = reference_reduce(t, op, in, full);
      std::vector<Bytes> out(n, Bytes(full * elem));
      const auto ops = make_ops(job, op, t);
      const int root = n - 1;
      // reduce-scatter, then reduce to the last rank, in one group: both queue on each rank's communicator in order
      std::vector<Bytes> reduced(n, Bytes(full * elem));
      ASSERT_NCCL(ncclGroupStart());
      for (int r = 0; r < n; ++r) {
        ASSERT_NCCL(ncclReduceScatter(in[r].data(), out[r].data(), count, nccl_type(t), ops[r], job[r], nullptr));
        ASSERT_NCCL(ncclReduce(in[r].data(), r == root ? reduced[r].data() : nullptr, full, nccl_type(t), ops[r], root,
                               job[r], nullptr));
      }
      ASSERT_NCCL(ncclGroupEnd());
      destroy_ops(job, ops);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(compare(out[r].data(), want.data() + r * count * elem, count, t), "")
            << "reduce_scatter " << tag(n, t, op, count) << " rank " << r;
      }
      ASSERT_EQ(compare(reduced[root].data(), want.data(), full, t), "") << "reduce " << tag(n, t, op, full);
    }
    // all-gather (rank r's block at r * count), in place on odd ranks; then broadcast from rank 0
    std::vector<Bytes> in, out(n, Bytes(full * elem));
    for (int r = 0; r < n; ++r) in.push_back(make_input(t, ReduceKind::kSum, r, count, 3));
    ASSERT_NCCL(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      const void* send = in[r].data();
      if (r % 2 == 1) {
        if (count) std::memcpy(out[r].data() + r * count * elem, in[r].data(), count * elem);
        send = out[r].data() + r * count * elem;
      }
      ASSERT_NCCL(ncclAllGather(send, out[r].data(), count, nccl_type(t), job[r], nullptr));
    }
    ASSERT_NCCL(ncclGroupEnd());
    for (int r = 0; r < n; ++r) {
      for (int b = 0; b < n; ++b) {
        ASSERT_EQ(compare(out[r].data() + b * count * elem, in[b].data(), count, t), "")
            << "all_gather block " << b << " on rank " << r << " " << fsdp::name(t) << " count " << count;
      }
    }
    std::vector<Bytes> bc(n, Bytes(count * elem));
    ASSERT_NCCL(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      ASSERT_NCCL(ncclBroadcast(in[r].data(), bc[r].data(), count, nccl_type(t), 0, job[r], nullptr));
    }
    ASSERT_NCCL(ncclGroupEnd());
    for (int r = 0; r < n; ++r) ASSERT_EQ(compare(bc[r].data(), in[0].data(), count, t), "") << "broadcast rank " << r;
  }
}

TEST_P(InitAllCollectives, PointToPointPatterns) {
  const auto [n, count] = GetParam();
  Job job(n);
  const DataType t = DataType::kFloat64;
  const size_t elem = 8, block = count * elem;
  std::vector<Bytes> in;
  for (int r = 0; r < n; ++r) in.push_back(make_input(t, ReduceKind::kSum, r, count * n, 5));

  // A ring both ways in one group: every rank sends before it receives, which only works because
  // the group posts everything before waiting.
  std::vector<Bytes> from_prev(n, Bytes(block)), from_next(n, Bytes(block));
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    ASSERT_NCCL(ncclSend(in[r].data(), count, ncclDouble, next, job[r], nullptr));
    ASSERT_NCCL(ncclSend(in[r].data(), count, ncclDouble, prev, job[r], nullptr));
    ASSERT_NCCL(ncclRecv(from_prev[r].data(), count, ncclDouble, prev, job[r], nullptr));
    ASSERT_NCCL(ncclRecv(from_next[r].data(), count, ncclDouble, next, job[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    // With n <= 2 next == prev: the two messages of one pair match in call order, both carry in[peer].
    ASSERT_EQ(compare(from_prev[r].data(), in[(r + n - 1) % n].data(), count, t), "") << "ring rank " << r;
    ASSERT_EQ(compare(from_next[r].data(), in[(r + 1) % n].data(), count, t), "") << "ring rank " << r;
  }

  // all-to-all: block j of rank i's input lands as block i of rank j's output
  std::vector<Bytes> a2a(n, Bytes(block * n));
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) ASSERT_NCCL(ncclAlltoAll(in[r].data(), a2a[r].data(), count, ncclDouble, job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(compare(a2a[j].data() + i * block, in[i].data() + j * block, count, t), "") << "alltoall " << i << "->" << j;
    }
  }

  // all-to-all-v as NCCL users write it (MoE token dispatch): grouped sends and receives of per-pair
  // counts, zeros and a hot rank included, placed back to back by prefix sums of the counts.
  auto pair_count = [&](int i, int j) -> size_t { return (i + 2 * j) % 3 == 0 ? 0 : (j == n - 1 ? 3 : 1) * count; };
  std::vector<std::vector<size_t>> send_at(n, std::vector<size_t>(n + 1)), recv_at(n, std::vector<size_t>(n + 1));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      send_at[r][p + 1] = send_at[r][p] + pair_count(r, p);
      recv_at[r][p + 1] = recv_at[r][p] + pair_count(p, r);
    }
  }
  std::vector<Bytes> v_in(n), v_out(n);
  for (int r = 0; r < n; ++r) {
    v_in[r] = make_input(t, ReduceKind::kSum, r, send_at[r][n], 7);
    v_out[r].assign(recv_at[r][n] * elem, std::byte{0xCD});
  }
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      ASSERT_NCCL(ncclSend(v_in[r].data() + send_at[r][p] * elem, pair_count(r, p), ncclDouble, p, job[r], nullptr));
      ASSERT_NCCL(ncclRecv(v_out[r].data() + recv_at[r][p] * elem, pair_count(p, r), ncclDouble, p, job[r], nullptr));
    }
  }
  ASSERT_NCCL(ncclGroupEnd());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(compare(v_out[j].data() + recv_at[j][i] * elem, v_in[i].data() + send_at[i][j] * elem, pair_count(i, j), t),
                "")
          << "alltoallv " << i << "->" << j;
    }
  }

  // gather to the last rank, scatter from rank 0
  const int root = n - 1;
  Bytes gathered(block * n);
  std::vector<Bytes> scattered(n, Bytes(block));
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ASSERT_NCCL(ncclGather(in[r].data(), r == root ? gathered.data() : nullptr, count, ncclDouble, root, job[r], nullptr));
    ASSERT_NCCL(ncclScatter(r == 0 ? in[0].data() : nullptr, scattered[r].data(), count, ncclDouble, 0, job[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(compare(gathered.data() + i * block, in[i].data(), count, t), "") << "gather block " << i;
    ASSERT_EQ(compare(scattered[i].data(), in[0].data() + i * block, count, t), "") << "scatter to " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, InitAllCollectives,
                         ::testing::Values(Case{1, 7}, Case{2, 0}, Case{2, 1000}, Case{3, 1}, Case{3, 70000},
                                           Case{5, 7}, Case{8, 1000}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "n" + std::to_string(i.param.n) + "_count" + std::to_string(i.param.count);
                         });

// --- Premul-sum scalars ----------------------------------------------------------------------------

TEST(NcclRedOp, DeviceResidenceReadsTheScalarWhenIssued) {
  Job job(2);
  double scalar = 3.0;
  std::vector<ncclRedOp_t> ops(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NCCL(ncclRedOpCreatePreMulSum(&ops[r], &scalar, ncclDouble, ncclScalarDevice, job[r]));
  }
  scalar = 5.0;  // read again by the operation
  double in[2] = {1.0, 2.0}, out[2] = {0, 0};
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) ASSERT_NCCL(ncclAllReduce(&in[r], &out[r], 1, ncclDouble, ops[r], job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(out[0], 15.0);
  EXPECT_EQ(out[1], 15.0);
  // A premul-sum op belongs to one type; destroyed handles are invalid.
  float f = 1;
  EXPECT_EQ(ncclAllReduce(&f, &f, 1, ncclFloat, ops[0], job[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(job[0])).find("made for type double"), std::string::npos)
      << ncclGetLastError(job[0]);
  for (int r = 0; r < 2; ++r) ASSERT_NCCL(ncclRedOpDestroy(ops[r], job[r]));
  EXPECT_EQ(ncclRedOpDestroy(ops[0], job[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(ncclSum, job[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&in[0], &out[0], 1, ncclDouble, ops[0], job[0], nullptr), ncclInvalidArgument);
}

// --- Error codes and texts -------------------------------------------------------------------------

TEST(NcclErrors, BadArgumentsAreCodesWithText) {
  Job job(2);
  float buf[4] = {};
  auto last = [&] { return std::string(ncclGetLastError(job[1])); };
  EXPECT_EQ(ncclAllReduce(nullptr, buf, 4, ncclFloat, ncclSum, job[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("ncclAllReduce on rank 1 of 2"), std::string::npos) << last();
  EXPECT_NE(last().find("sendbuff is NULL with count 4"), std::string::npos) << last();
  EXPECT_EQ(ncclAllGather(buf, buf, 1, ncclNumTypes, job[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("invalid data type 12"), std::string::npos) << last();
  EXPECT_EQ(ncclAllGather(buf, buf, 1, static_cast<ncclDataType_t>(-1), job[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 1, ncclFloat, static_cast<ncclRedOp_t>(99), job[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("invalid reduction op 99"), std::string::npos) << last();
  EXPECT_EQ(ncclBroadcast(buf, buf, 1, ncclFloat, 2, job[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("root 2 is outside [0, 2)"), std::string::npos) << last();
  EXPECT_EQ(ncclReduce(buf, buf, 1, ncclFloat, ncclSum, -1, job[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(buf, 1, ncclFloat, 5, job[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("peer 5 is outside [0, 2)"), std::string::npos) << last();
  EXPECT_EQ(ncclRecv(nullptr, 1, ncclFloat, 0, job[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("comm is NULL"), std::string::npos);
  // Nothing was sent: the communicators still work, and NULL buffers are fine with count 0.
  ncclResult_t async = ncclInternalError;
  ASSERT_NCCL(ncclCommGetAsyncError(job[1], &async));
  EXPECT_EQ(async, ncclSuccess);
  float a[2] = {1, 2}, b[2] = {0, 0};
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) {
    ASSERT_NCCL(ncclAllReduce(&a[r], &b[r], 1, ncclFloat, ncclSum, job[r], nullptr));
    ASSERT_NCCL(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, job[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(b[0], 3);
  EXPECT_EQ(b[1], 3);
}

TEST(NcclErrors, CommunicatorChecksBecomeInvalidArgument) {
  Job job(1);
  float buf[8] = {};
  // Overlapping but not in place: the communicator's own check, reported through the C layer.
  EXPECT_EQ(ncclAllReduce(buf, buf + 1, 4, ncclFloat, ncclSum, job[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(job[0])).find("overlap"), std::string::npos) << ncclGetLastError(job[0]);
  int ibuf[1] = {1};
  ncclRedOp_t half;
  const double h = 0.5;
  ASSERT_NCCL(ncclRedOpCreatePreMulSum(&half, const_cast<double*>(&h), ncclDouble, ncclScalarHostImmediate, job[0]));
  ASSERT_NCCL(ncclRedOpDestroy(half, job[0]));
  int two = 2;
  ncclRedOp_t op;
  ASSERT_NCCL(ncclRedOpCreatePreMulSum(&op, &two, ncclInt32, ncclScalarHostImmediate, job[0]));
  ASSERT_NCCL(ncclAllReduce(ibuf, ibuf, 1, ncclInt32, op, job[0], nullptr));
  EXPECT_EQ(ibuf[0], 2);
}

TEST(NcclErrors, ErrorStringsAndVersion) {
  std::set<std::string> seen;
  for (int code = ncclSuccess; code < ncclNumResults; ++code) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(code));
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 3u);
    EXPECT_TRUE(seen.insert(s).second) << "duplicate string for " << code;
  }
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidArgument), "invalid argument");
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(1234)), "unknown result code");
  int v = 0;
  ASSERT_NCCL(ncclGetVersion(&v));
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(v, 22800);
  EXPECT_EQ(NCCL_VERSION(2, 8, 4), 2804);  // the old encoding up to 2.8
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST(NcclErrors, HeaderCompilesAsC99) { EXPECT_EQ(nccl_c99_header_check(), 0); }

TEST(NcclErrors, UnsupportedAndTrivialCalls) {
  Job job(1);
  EXPECT_EQ(ncclCommRevoke(job[0], NCCL_REVOKE_DEFAULT), ncclInvalidUsage);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  ncclWindow_t win;
  EXPECT_EQ(ncclCommWindowRegister(job[0], nullptr, 0, &win, NCCL_WIN_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowDeregister(job[0], nullptr), ncclInvalidArgument);
  int device = 7;
  ASSERT_NCCL(ncclCommCuDevice(job[0], &device));
  EXPECT_EQ(device, -1);
  void* p = nullptr;
  ASSERT_NCCL(ncclMemAlloc(&p, 1000));
  ASSERT_NE(p, nullptr);
  void* handle = nullptr;
  ASSERT_NCCL(ncclCommRegister(job[0], p, 1000, &handle));
  EXPECT_EQ(handle, p);
  ASSERT_NCCL(ncclCommDeregister(job[0], handle));
  ASSERT_NCCL(ncclMemFree(p));
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  ncclComm_t none[1];
  EXPECT_EQ(ncclCommInitAll(none, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

TEST(NcclErrors, HandlesAreCheckedBeforeUse) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_NCCL(ncclCommInitAll(comms, 2, nullptr));
  ncclComm_t destroyed = comms[1];
  ASSERT_NCCL(ncclCommAbort(comms[1]));  // one rank alone: destroy would wait for its peer
  float buf[4] = {};
  // Every kind of entry on a destroyed handle: an error naming it, never a read of freed memory
  // (which ASan would report).
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, destroyed, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("was destroyed or aborted"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_NE(std::string(ncclGetLastError(destroyed)).find("ncclAllReduce"), std::string::npos);
  int count = 0;
  EXPECT_EQ(ncclCommCount(destroyed, &count), ncclInvalidArgument);
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(destroyed, &async), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(destroyed), ncclInvalidArgument);
  EXPECT_EQ(ncclCommAbort(destroyed), ncclInvalidArgument);
  ncclComm_t child = nullptr;
  EXPECT_EQ(ncclCommSplit(destroyed, 0, 0, &child, nullptr), ncclInvalidArgument);

  // A pointer that never was a communicator is not dereferenced either.
  alignas(64) char garbage[4096];
  std::memset(garbage, 0xab, sizeof(garbage));
  auto* foreign = reinterpret_cast<ncclComm_t>(garbage);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, foreign, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("is not a communicator of this library"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommUserRank(foreign, &count), ncclInvalidArgument);

  // Inside a group the bad handle fails the group at the call.
  ASSERT_NCCL(ncclGroupStart());
  EXPECT_EQ(ncclBroadcast(buf, buf, 4, ncclFloat, 0, destroyed, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  ASSERT_NCCL(ncclCommAbort(comms[0]));
}

// ncclMemAlloc memory registers as a window (any part of it); memory from elsewhere is refused with
// ncclInvalidArgument and the communicator stays usable. (The collectives over windows at 2 and 3
// ranks: nccl.mpi.window_np*, tests/nccl/nccl_window_check.c.)
TEST(NcclErrors, WindowRegistrationTakesOnlyMemAllocMemory) {
  Job job(1);
  void* p = nullptr;
  ASSERT_NCCL(ncclMemAlloc(&p, 8192));
  ncclWindow_t win = nullptr;
  ASSERT_NCCL(ncclCommWindowRegister(job[0], static_cast<char*>(p) + 4096, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
  ASSERT_NE(win, nullptr);
  ASSERT_NCCL(ncclCommWindowDeregister(job[0], win));
  std::vector<float> plain(1024, 1.f);
  win = nullptr;
  EXPECT_EQ(ncclCommWindowRegister(job[0], plain.data(), 4096, &win, NCCL_WIN_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(win, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(job[0])).find("only memory from ncclMemAlloc"), std::string::npos)
      << ncclGetLastError(job[0]);
  ASSERT_NCCL(ncclAllReduce(plain.data(), plain.data(), plain.size(), ncclFloat, ncclSum, job[0], nullptr));
  ASSERT_NCCL(ncclMemFree(p));
}

TEST(NcclErrors, MemFreeTakesOnlyWhatMemAllocGave) {
  void* p = nullptr;
  ASSERT_NCCL(ncclMemAlloc(&p, 64));
  int on_stack = 0;
  EXPECT_EQ(ncclMemFree(&on_stack), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("was not returned by ncclMemAlloc"), std::string::npos);
  ASSERT_NCCL(ncclMemFree(p));
  EXPECT_EQ(ncclMemFree(p), ncclInvalidArgument) << "a second free is refused, not a double free";
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
}

// --- Groups ----------------------------------------------------------------------------------------

TEST(NcclGroup, NestedGroupsRunAtTheOutermostEnd) {
  Job job(2);
  int in[2] = {1, 2}, out[2] = {-1, -1};
  ASSERT_NCCL(ncclGroupStart());
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) ASSERT_NCCL(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  // Still queued: nothing was posted at the inner end.
  EXPECT_EQ(out[0], -1);
  EXPECT_EQ(out[1], -1);
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 3);
}

TEST(NcclGroup, EndWithoutStartIsInvalidUsage) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("no ncclGroupStart"), std::string::npos);
}

TEST(NcclGroup, AFailedCallFailsTheGroupAndNothingRuns) {
  Job job(2);
  int in[2] = {1, 2}, out[2] = {-1, -1};
  ASSERT_NCCL(ncclGroupStart());
  ASSERT_NCCL(ncclAllReduce(&in[0], &out[0], 1, ncclInt32, ncclSum, job[0], nullptr));
  EXPECT_EQ(ncclAllReduce(&in[1], nullptr, 1, ncclInt32, ncclSum, job[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(out[0], -1);  // rank 0's all-reduce never started, so it cannot wait for rank 1 forever
  // The next group is independent of the failed one.
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) ASSERT_NCCL(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(out[0], 3);
}

TEST(NcclGroup, GroupsArePerThread) {
  // Each rank on its own thread, each with its own group: NCCL's one-thread-per-rank pattern.
  Job job(3);
  std::vector<int> out(3, -1);
  std::vector<ncclResult_t> results(3, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      int in = r + 1;
      ncclResult_t a = ncclGroupStart();
      ncclResult_t b = ncclAllReduce(&in, &out[r], 1, ncclInt32, ncclSum, job[r], nullptr);
      ncclResult_t c = ncclGroupEnd();
      // And a call outside any group blocks until it completed.
      int x = r;
      ncclResult_t d = ncclAllReduce(&x, &x, 1, ncclInt32, ncclMax, job[r], nullptr);
      results[r] = a != ncclSuccess ? a : b != ncclSuccess ? b : c != ncclSuccess ? c : d != ncclSuccess ? d
                   : x == 2 ? ncclSuccess : ncclInternalError;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    EXPECT_EQ(out[r], 6);
  }
}

// --- Split -----------------------------------------------------------------------------------------

TEST(NcclSplit, ColorsAndKeysInAGroup) {
  Job job(5);
  std::vector<ncclComm_t> child(5, nullptr);
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 5; ++r) {
    // Even ranks form one communicator ordered by descending rank; rank 3 opts out.
    const int color = r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2;
    ASSERT_NCCL(ncclCommSplit(job[r], color, -r, &child[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(child[3], nullptr);
  const int want_size[5] = {3, 1, 3, 0, 3};
  const int want_rank[5] = {2, 0, 1, 0, 0};  // evens by key -r: 4, 2, 0
  for (int r = 0; r < 5; ++r) {
    if (r == 3) continue;
    ASSERT_NE(child[r], nullptr);
    int n = 0, me = -1;
    ASSERT_NCCL(ncclCommCount(child[r], &n));
    ASSERT_NCCL(ncclCommUserRank(child[r], &me));
    EXPECT_EQ(n, want_size[r]) << r;
    EXPECT_EQ(me, want_rank[r]) << r;
  }
  // Each child reduces over its own members only, concurrently with the parent.
  int in[5] = {1, 10, 100, 1000, 10000}, out[5] = {}, all[5] = {};
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 5; ++r) {
    if (child[r]) {
      ASSERT_NCCL(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, child[r], nullptr));
    }
    ASSERT_NCCL(ncclAllReduce(&in[r], &all[r], 1, ncclInt32, ncclSum, job[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  EXPECT_EQ(out[0], 10101);
  EXPECT_EQ(out[2], 10101);
  EXPECT_EQ(out[4], 10101);
  EXPECT_EQ(out[1], 10);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(all[r], 11111);
  for (ncclComm_t c : child) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(ncclCommSplit(job[0], -7, 0, &child[0], nullptr), ncclInvalidArgument);
}

// --- Finalize, abort and broken communicators ------------------------------------------------------

TEST(NcclLifecycle, FinalizeThenOnlyDestroy) {
  ncclComm_t c;
  ASSERT_NCCL(ncclCommInitAll(&c, 1, nullptr));
  ASSERT_NCCL(ncclCommFinalize(c));
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("finalized"), std::string::npos) << ncclGetLastError(c);
  EXPECT_EQ(ncclCommFinalize(c), ncclInvalidUsage);
  ASSERT_NCCL(ncclCommDestroy(c));
}

TEST(NcclLifecycle, AbortFromAnotherThreadEndsABlockedCall) {
  ncclComm_t c[2];
  ASSERT_NCCL(ncclCommInitAll(c, 2, nullptr));
  ncclResult_t blocked = ncclSuccess;
  std::thread t([&] {
    float x = 1;
    // Rank 1 never joins: this waits until the abort.
    blocked = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c[0], nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NCCL(ncclCommAbort(c[0]));
  t.join();
  EXPECT_EQ(blocked, ncclInvalidUsage);
  ASSERT_NCCL(ncclCommDestroy(c[1]));
}

TEST(NcclLifecycle, TimeoutBreaksTheCommunicator) {
  ::setenv("FSDP_TIMEOUT_SEC", "0.3", 1);
  ncclComm_t c[2];
  ASSERT_NCCL(ncclCommInitAll(c, 2, nullptr));
  ::unsetenv("FSDP_TIMEOUT_SEC");
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c[0], nullptr), ncclRemoteError);
  const std::string text = ncclGetLastError(c[0]);
  EXPECT_NE(text.find("ncclAllReduce on rank 0 of 2"), std::string::npos) << text;
  EXPECT_NE(text.find("op all_reduce"), std::string::npos) << text;
  ncclResult_t async = ncclSuccess;
  ASSERT_NCCL(ncclCommGetAsyncError(c[0], &async));
  EXPECT_EQ(async, ncclRemoteError);
  // Later calls fail at once with the same code, naming the first error.
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c[0], nullptr), ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(c[0])).find("broken by an earlier error"), std::string::npos);
  ASSERT_NCCL(ncclCommGetAsyncError(c[1], &async));
  EXPECT_EQ(async, ncclSuccess);
  ASSERT_NCCL(ncclCommAbort(c[0]));
  ASSERT_NCCL(ncclCommAbort(c[1]));
}

// --- ncclCommInitRank: the unique-id rendezvous, ranks as threads ----------------------------------

void check_world(std::vector<ncclComm_t>& comms) {
  const int n = static_cast<int>(comms.size());
  for (int r = 0; r < n; ++r) {
    int size = 0, rank = -1;
    ASSERT_NCCL(ncclCommCount(comms[r], &size));
    ASSERT_NCCL(ncclCommUserRank(comms[r], &rank));
    EXPECT_EQ(size, n);
    EXPECT_EQ(rank, r);
  }
  const size_t count = 50000;
  std::vector<Bytes> in, out(n, Bytes(count * n * 4));
  for (int r = 0; r < n; ++r) in.push_back(make_input(DataType::kFloat32, ReduceKind::kSum, r, count));
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ASSERT_NCCL(ncclAllGather(in[r].data(), out[r].data(), count, ncclFloat, comms[r], nullptr));
  }
  ASSERT_NCCL(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < n; ++b) ASSERT_EQ(compare(out[r].data() + b * count * 4, in[b].data(), count, DataType::kFloat32), "");
  }
  // Finalize in a group: every rank's shutdown waits for the others.
  ASSERT_NCCL(ncclGroupStart());
  for (ncclComm_t c : comms) ASSERT_NCCL(ncclCommFinalize(c));
  ASSERT_NCCL(ncclGroupEnd());
  for (ncclComm_t c : comms) ASSERT_NCCL(ncclCommDestroy(c));
}

void init_ranks_in_group(std::vector<ncclComm_t>& comms, const ncclUniqueId& id) {
  const int n = static_cast<int>(comms.size());
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) ASSERT_NCCL(ncclCommInitRank(&comms[r], n, id, r));
  ASSERT_NCCL(ncclGroupEnd());
}

class InitRank : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ::setenv("FSDP_TRANSPORT", GetParam(), 1); }
  void TearDown() override { ::unsetenv("FSDP_TRANSPORT"); }
};

TEST_P(InitRank, UniqueIdRendezvousInAGroup) {
  ncclUniqueId id, other;
  ASSERT_NCCL(ncclGetUniqueId(&id));
  ASSERT_NCCL(ncclGetUniqueId(&other));
  EXPECT_NE(std::memcmp(&id, &other, sizeof(id)), 0) << "every id names a fresh job";
  std::vector<ncclComm_t> comms(3, nullptr);
  init_ranks_in_group(comms, id);
  check_world(comms);
}

TEST_P(InitRank, ConfigNameAndOneRank) {
  ncclUniqueId id;
  ASSERT_NCCL(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // accepted; every call still completes before it returns
  config.commName = "trainer";
  ncclComm_t c = nullptr;
  ASSERT_NCCL(ncclCommInitRankConfig(&c, 1, id, 0, &config));
  ncclResult_t async = ncclInProgress;
  ASSERT_NCCL(ncclCommGetAsyncError(c, &async));
  EXPECT_EQ(async, ncclSuccess);
  float x = 2;
  EXPECT_EQ(ncclBroadcast(&x, &x, 1, ncclFloat, 1, c, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("comm 'trainer'"), std::string::npos) << ncclGetLastError(c);
  ASSERT_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c, nullptr));
  EXPECT_EQ(x, 2);
  ASSERT_NCCL(ncclCommDestroy(c));
}

#if defined(__SANITIZE_THREAD__)
// Threads of this process; ThreadSanitizer cannot follow a fork of a multi-threaded process.
int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return 0;
}
#endif

// Ranks as processes, NCCL's MPI pattern with shared memory as the side channel: rank 0 makes the id,
// rank 1 reads it. A rank killed mid-job makes the survivor's next operation fail with ncclRemoteError
// naming the lost peer and breaks the communicator; nothing hangs and nothing aborts the survivor.
TEST_P(InitRank, KilledPeerIsRemoteError) {
#if defined(__SANITIZE_THREAD__)
  if (thread_count() > 1) GTEST_SKIP() << "threads are running: ThreadSanitizer cannot fork (run this case alone)";
#endif
  struct Shared {
    std::atomic<int> ready;
    ncclUniqueId id;
  };
  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* shared = new (mem) Shared{};
  const auto codes = fsdp::testing::run_processes(2, std::chrono::seconds(60), [&](int rank) -> int {
    if (rank == 0) {
      if (ncclGetUniqueId(&shared->id) != ncclSuccess) return 9;
      shared->ready.store(1, std::memory_order_release);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (shared->ready.load(std::memory_order_acquire) == 0) {
        if (std::chrono::steady_clock::now() > deadline) return 8;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ncclComm_t c = nullptr;
    if (ncclCommInitRank(&c, 2, shared->id, rank) != ncclSuccess) return 10;
    float x = 1;
    if (ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c, nullptr) != ncclSuccess || x != 2) return 11;
    if (rank == 1) ::raise(SIGKILL);
    std::vector<float> big(1 << 18, 1.0f);
    const ncclResult_t r = ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat, ncclSum, c, nullptr);
    const std::string text = ncclGetLastError(c);
    if (r != ncclRemoteError) {
      std::fprintf(stderr, "got %d: %s\n", static_cast<int>(r), text.c_str());
      return 12;
    }
    for (const char* needle : {"ncclAllReduce on rank 0 of 2", "peer 1", "op all_reduce"}) {
      if (text.find(needle) == std::string::npos) {
        std::fprintf(stderr, "'%s' missing from: %s\n", needle, text.c_str());
        return 13;
      }
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(c, &async) != ncclSuccess || async != ncclRemoteError) return 14;
    return ncclCommAbort(c) == ncclSuccess ? 0 : 15;
  });
  ::munmap(mem, sizeof(Shared));
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Transports, InitRank, ::testing::Values("auto", "tcp"));

TEST(NcclInitRank, NcclCommIdNamesRankZerosStore) {
  // A port that was free a moment ago (rank 0 binds it in ncclCommInitRank).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  ::setenv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  ncclUniqueId a, b;
  ASSERT_NCCL(ncclGetUniqueId(&a));
  ASSERT_NCCL(ncclGetUniqueId(&b));
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(a)), 0) << "every rank can compute the same id";
  std::vector<ncclComm_t> comms(2, nullptr);
  init_ranks_in_group(comms, a);
  ::unsetenv("NCCL_COMM_ID");
  check_world(comms);
}

TEST(NcclInitRank, BadArgumentsAndIds) {
  ncclUniqueId id;
  ASSERT_NCCL(ncclGetUniqueId(&id));
  ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 2 is outside [0, 2)"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  EXPECT_EQ(ncclCommInitRank(&c, 1, zero, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not made by ncclGetUniqueId"), std::string::npos);
  // Any single damaged byte of a real id is caught by its checksum before a field is used (a damaged
  // host would otherwise be looked up, a damaged port connected to).
  for (size_t at : {9u, 10u, 13u, 40u, 100u, 126u}) {
    ncclUniqueId damaged = id;
    damaged.internal[at] = static_cast<char>(damaged.internal[at] ^ 0x20);
    EXPECT_EQ(ncclCommInitRank(&c, 1, damaged, 0), ncclInvalidArgument) << "byte " << at;
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("checksum mismatch"), std::string::npos)
        << "byte " << at << ": " << ncclGetLastError(nullptr);
  }
  ncclConfig_t config;
  std::memset(&config, 0, sizeof(config));
  EXPECT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_CONFIG_INITIALIZER"), std::string::npos);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
}

}  // namespace
