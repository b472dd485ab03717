// Every collective x data type x op x count x in-place, at world sizes 1 to 144, over the
// in-process transport, checked bitwise against the naive reference. Each collective runs once with
// the latency-optimised algorithm and once with the bandwidth-optimal ring, with a tiny chunk size so
// even small counts pipeline over several chunks.
#include <gtest/gtest.h>

#include <cstring>

#include "collectives/algorithms/algorithms.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

const size_t kCounts[] = {0, 1, 7, 1000};

std::vector<std::string> algorithms_of(const std::string& collective) {
  std::vector<std::string> names;
  for (const auto& info : algorithm_registry()) {
    if (name(info.collective) == collective) names.emplace_back(info.name);
  }
  return names;
}

// Tiny chunks make count 1000 span several of them; at 144 ranks they would only multiply messages.
bool is_latency_algorithm(const std::string& collective, const std::string& algo) {
  for (const auto& info : algorithm_registry()) {
    if (name(info.collective) == collective && info.name == algo) return info.small_messages;
  }
  return false;
}

CommOptions test_options(const std::string& forced, int n) {
  CommOptions o;
  o.chunk_bytes = n <= 16 ? 256 : 4096;
  o.timeout = std::chrono::seconds(60);
  o.algorithms = forced;
  return o;
}

// The case being checked, for failure messages raised on rank threads (SCOPED_TRACE is per thread).
std::string g_case;

void fill(std::vector<std::byte>& v) { std::fill(v.begin(), v.end(), std::byte{0xCD}); }

void check_all_gather(InProcJob& job, DataType t, size_t count, bool in_place) {
  const int n = job.size();
  const size_t block = count * element_size(t);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<std::byte> want;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(make_input(t, ReduceKind::kSum, r, count));
    want.insert(want.end(), inputs[r].begin(), inputs[r].end());
  }
  job.run([&](Communicator& c) {
    std::vector<std::byte> out(block * n);
    fill(out);
    const int r = c.rank();
    const void* send = inputs[r].data();
    if (in_place) {
      std::copy(inputs[r].begin(), inputs[r].end(), out.begin() + r * block);
      send = out.data() + r * block;
    }
    c.all_gather(send, out.data(), count, t).wait();
    std::string diff = compare(out.data(), want.data(), count * n, t);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": rank " << r << ": " << diff;
  });
}

void check_reduce_scatter(InProcJob& job, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = job.size();
  const size_t block = count * element_size(t);
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, op.kind, r, count * n));
  const std::vector<std::byte> want = reference_reduce(t, op, inputs, count * n);
  job.run([&](Communicator& c) {
    const int r = c.rank();
    std::vector<std::byte> buf = inputs[r];
    std::vector<std::byte> out(block);
    fill(out);
    std::byte* result = in_place ? buf.data() + r * block : out.data();
    c.reduce_scatter(buf.data(), result, count, t, op).wait();
    std::string diff = compare(result, want.data() + r * block, count, t, r * count);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": rank " << r << ": " << diff;
  });
}

void check_all_reduce(InProcJob& job, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = job.size();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, op.kind, r, count));
  const std::vector<std::byte> want = reference_reduce(t, op, inputs, count);
  job.run([&](Communicator& c) {
    const int r = c.rank();
    std::vector<std::byte> buf = inputs[r];
    std::vector<std::byte> out(buf.size());
    fill(out);
    std::byte* result = in_place ? buf.data() : out.data();
    c.all_reduce(buf.data(), result, count, t, op).wait();
    std::string diff = compare(result, want.data(), count, t);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": rank " << r << ": " << diff;
  });
}

void check_broadcast(InProcJob& job, DataType t, size_t count, bool in_place) {
  const int n = job.size();
  const int root = static_cast<int>(count % n);
  const std::vector<std::byte> data = make_input(t, ReduceKind::kSum, root, count, 3);
  job.run([&](Communicator& c) {
    std::vector<std::byte> out(data.size());
    fill(out);
    const void* send = data.data();
    if (in_place && c.rank() == root) {
      out = data;
      send = out.data();
    }
    c.broadcast(send, out.data(), count, t, root).wait();
    std::string diff = compare(out.data(), data.data(), count, t);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": rank " << c.rank() << " (root " << root << "): " << diff;
  });
}

void check_reduce(InProcJob& job, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = job.size();
  const int root = static_cast<int>((count + 1) % n);
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, op.kind, r, count));
  const std::vector<std::byte> want = reference_reduce(t, op, inputs, count);
  job.run([&](Communicator& c) {
    const int r = c.rank();
    std::vector<std::byte> buf = inputs[r];
    std::vector<std::byte> out(buf.size());
    fill(out);
    std::byte* result = in_place ? buf.data() : out.data();
    c.reduce(buf.data(), r == root ? result : nullptr, count, t, op, root).wait();
    if (r != root) return;
    std::string diff = compare(result, want.data(), count, t);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": root " << r << ": " << diff;
  });
}

// Each rank sends to the next and receives from the previous, posted back to back.
void check_send_recv(InProcJob& job, DataType t, size_t count) {
  const int n = job.size();
  job.run([&](Communicator& c) {
    const int r = c.rank();
    const int from = (r - 1 + n) % n;
    std::vector<std::byte> mine = make_input(t, ReduceKind::kSum, r, count);
    std::vector<std::byte> want = make_input(t, ReduceKind::kSum, from, count);
    std::vector<std::byte> got(want.size());
    fill(got);
    Work s = c.send(mine.data(), count, t, (r + 1) % n);
    Work v = c.recv(got.data(), count, t, from);
    s.wait();
    v.wait();
    std::string diff = compare(got.data(), want.data(), count, t);
    if (!diff.empty()) ADD_FAILURE() << g_case << ": rank " << r << " from " << from << ": " << diff;
  });
}

using Param = std::tuple<std::string, int, DataType>;

class CollectiveMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(CollectiveMatrix, MatchesReference) {
  const auto& [collective, n, t] = GetParam();
  std::vector<std::string> algos = algorithms_of(collective == "send_recv" ? "barrier" : collective);
  for (const std::string& algo : algos) {
    SCOPED_TRACE("algorithm " + algo);
    InProcJob job(n, test_options(collective == "send_recv" ? "" : collective + "=" + algo, n));
    if (algo == "hierarchical") {
      // Uneven hosts whose ranks are not contiguous: host sizes differ and interleave in rank order.
      const int hosts = std::max(1, (n + 2) / 3);
      std::vector<int> host_of(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) host_of[static_cast<size_t>(r)] = (r * r + r / 2) % hosts;
      for (int r = 0; r < n; ++r) job.comm(r).set_host_layout(host_of);
    }
    if (collective == "barrier") {
      if (t != DataType::kFloat32) return;  // typeless: once is enough
      for (int i = 0; i < 5; ++i) job.run([](Communicator& c) { c.barrier().wait(); });
      continue;
    }
    {
      const bool reduces = collective == "reduce_scatter" || collective == "all_reduce" || collective == "reduce";
      std::vector<ReduceOp> ops = reduces ? all_reduce_ops() : std::vector<ReduceOp>{ReduceOp::sum()};
      for (const ReduceOp& op : ops) {
        for (size_t count : kCounts) {
          // A latency algorithm moves log2(n) whole buffers: at 144 ranks only small counts are its job.
          if (n > 16 && count > 7 && is_latency_algorithm(collective, algo)) continue;
          for (bool in_place : {false, true}) {
            g_case = algo + " " + std::string(name(t)) + " " + std::string(name(op.kind)) + " count " +
                     std::to_string(count) + (in_place ? " in place" : "");
            SCOPED_TRACE(std::string(name(t)) + " " + std::string(name(op.kind)) + " count " +
                         std::to_string(count) + (in_place ? " in place" : " out of place"));
            if (collective == "all_gather") check_all_gather(job, t, count, in_place);
            if (collective == "reduce_scatter") check_reduce_scatter(job, t, op, count, in_place);
            if (collective == "all_reduce") check_all_reduce(job, t, op, count, in_place);
            if (collective == "broadcast") check_broadcast(job, t, count, in_place);
            if (collective == "reduce") check_reduce(job, t, op, count, in_place);
            if (collective == "send_recv" && !in_place) check_send_recv(job, t, count);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param) + "_n" + std::to_string(std::get<1>(info.param)) + "_" +
         std::string(name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    AllSizes, CollectiveMatrix,
    ::testing::Combine(::testing::Values("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "barrier",
                                         "send_recv"),
                       ::testing::Values(1, 2, 3, 4, 5, 7, 8, 16, 144), ::testing::ValuesIn(all_data_types())),
    param_name);

}  // namespace
}  // namespace fsdp::testing
