#include "tests/collectives/test_support.h"

#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <sstream>

#include "collectives/transports/inproc.h"
#include "collectives/core/progress_engine.h"
#include "collectives/kernels/reduce_kernels.h"
#include "launch/fork_ranks.h"

namespace fsdp::testing {

namespace {
// Rank threads allocate and free megabyte buffers for every case; keeping freed memory in the heap
// (instead of a fresh mmap and page faults each time) makes the 144-rank cases several times faster.
const bool kHeapTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
}  // namespace

InProcJob::InProcJob(int n, CommOptions options) : n_(n), start_(n + 1), done_(n + 1), errors_(n) {
  auto engine = std::make_shared<ProgressEngine>();
  auto transports = make_inproc_transports(n);
  for (int r = 0; r < n; ++r) comms_.push_back(Communicator::create(transports[r], options, engine));
  for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { worker(r); });
}

InProcJob::~InProcJob() {
  stop_ = true;
  start_.arrive_and_wait();
  for (auto& t : threads_) t.join();
}

void InProcJob::worker(int r) {
  for (;;) {
    start_.arrive_and_wait();
    if (stop_) return;
    try {
      (*fn_)(*comms_[r]);
    } catch (...) {
      errors_[r] = std::current_exception();
    }
    done_.arrive_and_wait();
  }
}

void InProcJob::run(const std::function<void(Communicator&)>& fn) {
  fn_ = &fn;
  start_.arrive_and_wait();
  done_.arrive_and_wait();
  for (auto& e : errors_) {
    if (e) {
      auto first = e;
      for (auto& x : errors_) x = nullptr;
      std::rethrow_exception(first);
    }
  }
}

namespace {

double decode(DataType t, const std::byte* p) {
  switch (t) {
    case DataType::kInt8: return static_cast<double>(*reinterpret_cast<const int8_t*>(p));
    case DataType::kUint8: return static_cast<double>(*reinterpret_cast<const uint8_t*>(p));
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default: {
      float f;
      widen_to_f32(&f, p, 1, t, 1.0);
      return f;
    }
  }
}

void encode_float(DataType t, float v, std::byte* p) {
  if (t == DataType::kFloat32) {
    std::memcpy(p, &v, 4);
  } else {
    narrow_from_f32(p, &v, 1, t);
  }
}

// Raw two's-complement bits of an integer element, sign-extended.
int64_t load_int(DataType t, const std::byte* p) {
  switch (t) {
    case DataType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case DataType::kUint8: return *reinterpret_cast<const uint8_t*>(p);
    case DataType::kInt32: return *reinterpret_cast<const int32_t*>(p);
    case DataType::kUint32: return *reinterpret_cast<const uint32_t*>(p);
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

bool is_unsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}

// Keeps the low bits of v as t would after wrapping arithmetic, sign-extended again.
int64_t wrap(DataType t, uint64_t v) {
  switch (t) {
    case DataType::kInt8: return static_cast<int8_t>(v);
    case DataType::kUint8: return static_cast<uint8_t>(v);
    case DataType::kInt32: return static_cast<int32_t>(v);
    case DataType::kUint32: return static_cast<uint32_t>(v);
    default: return static_cast<int64_t>(v);
  }
}

void store_int(DataType t, int64_t v, std::byte* p) { std::memcpy(p, &v, element_size(t)); }  // little endian

}  // namespace

std::vector<std::byte> make_input(DataType t, ReduceKind op, int rank, size_t count, int salt) {
  // The values repeat with a short period in the index, so one period is encoded and then tiled.
  const long long period = op == ReduceKind::kProd ? 35 : (op == ReduceKind::kMax || op == ReduceKind::kMin ? 23 : 9);
  const size_t elem = element_size(t);
  std::vector<std::byte> pattern(period * elem);
  for (long long j = 0; j < period; ++j) {
    const long long k = j + salt * 101;
    int64_t v;
    switch (op) {
      case ReduceKind::kProd: v = (rank + k) % 5 == 0 ? 2 : ((rank * 3 + k) % 7 == 0 ? -1 : 1); break;
      case ReduceKind::kMax:
      case ReduceKind::kMin: v = (rank * 31 + k * 17) % 23 - 11; break;
      default: v = (rank * 7 + k * 13) % 9 - 4; break;
    }
    std::byte* p = pattern.data() + j * elem;
    if (t == DataType::kFloat64) {
      double d = static_cast<double>(v);
      std::memcpy(p, &d, 8);
    } else if (is_floating(t)) {
      encode_float(t, static_cast<float>(v), p);
    } else {
      store_int(t, wrap(t, static_cast<uint64_t>(v)), p);
    }
  }
  std::vector<std::byte> out(count * elem);
  for (size_t i = 0; i < count; i += period) {
    std::memcpy(out.data() + i * elem, pattern.data(), std::min<size_t>(period, count - i) * elem);
  }
  return out;
}

std::vector<std::byte> reference_reduce(DataType t, ReduceOp op, const std::vector<std::vector<std::byte>>& inputs,
                                        size_t count) {
  const size_t elem = element_size(t);
  const int n = static_cast<int>(inputs.size());
  std::vector<std::byte> out(count * elem);
  const ReduceKind kind = op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum ? ReduceKind::kSum : op.kind;
  // Rank-major loops over decoded copies: 144 ranks x 144k elements must stay cheap.
  if (is_floating(t)) {
    std::vector<double> acc(count), x(count);
    std::vector<float> wide(count);
    for (int r = 0; r < n; ++r) {
      if (t == DataType::kFloat64) {
        if (count) std::memcpy(x.data(), inputs[r].data(), count * 8);
      } else {
        widen_to_f32(wide.data(), inputs[r].data(), count, t, 1.0);
        for (size_t i = 0; i < count; ++i) x[i] = wide[i];
      }
      if (op.kind == ReduceKind::kPremulSum) {
        for (double& v : x) v *= op.scalar;
      }
      if (r == 0) {
        acc = x;
        continue;
      }
      for (size_t i = 0; i < count; ++i) {
        switch (kind) {
          case ReduceKind::kSum: acc[i] += x[i]; break;
          case ReduceKind::kProd: acc[i] *= x[i]; break;
          case ReduceKind::kMax: acc[i] = std::max(acc[i], x[i]); break;
          default: acc[i] = std::min(acc[i], x[i]); break;
        }
      }
    }
    for (size_t i = 0; i < count; ++i) {
      std::byte* dst = out.data() + i * elem;
      if (t == DataType::kFloat64) {
        double a = acc[i];
        if (op.kind == ReduceKind::kAvg) a /= n;
        std::memcpy(dst, &a, 8);
      } else {
        float a = static_cast<float>(acc[i]);
        if (op.kind == ReduceKind::kAvg) a /= static_cast<float>(n);
        encode_float(t, a, dst);
      }
    }
    return out;
  }
  // Integers: sums and products wrap like the type does; max and min compare as the type does.
  std::vector<int64_t> acc(count);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      int64_t x = load_int(t, inputs[r].data() + i * elem);
      if (op.kind == ReduceKind::kPremulSum) {
        x = wrap(t, static_cast<uint64_t>(x) * static_cast<uint64_t>(static_cast<int64_t>(op.scalar)));
      }
      int64_t& a = acc[i];
      if (r == 0) {
        a = x;
      } else if (kind == ReduceKind::kSum) {
        a = wrap(t, static_cast<uint64_t>(a) + static_cast<uint64_t>(x));
      } else if (kind == ReduceKind::kProd) {
        a = wrap(t, static_cast<uint64_t>(a) * static_cast<uint64_t>(x));
      } else {
        const bool greater = is_unsigned(t) ? static_cast<uint64_t>(x) > static_cast<uint64_t>(a) : x > a;
        const bool less = is_unsigned(t) ? static_cast<uint64_t>(x) < static_cast<uint64_t>(a) : x < a;
        if (kind == ReduceKind::kMax ? greater : less) a = x;
      }
    }
  }
  for (size_t i = 0; i < count; ++i) {
    int64_t result = acc[i];
    if (op.kind == ReduceKind::kAvg) {
      result = is_unsigned(t) ? static_cast<int64_t>(static_cast<uint64_t>(result) / static_cast<uint64_t>(n))
                              : result / n;
    }
    store_int(t, result, out.data() + i * elem);
  }
  return out;
}

std::string compare(const std::byte* got, const std::byte* want, size_t count, DataType t, size_t offset_elems) {
  const size_t elem = element_size(t);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * elem, want + i * elem, elem) == 0) continue;
    std::ostringstream out;
    out << "element " << (i + offset_elems) << " of " << count << " (" << name(t) << "): got ";
    if (is_floating(t)) {
      out << decode(t, got + i * elem) << ", want " << decode(t, want + i * elem);
    } else {
      out << load_int(t, got + i * elem) << ", want " << load_int(t, want + i * elem);
    }
    return out.str();
  }
  return {};
}

ShellResult run_shell(const std::string& command) {
  ShellResult r;
  const auto start = std::chrono::steady_clock::now();
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<int> run_processes(int n, std::chrono::seconds deadline, const std::function<int(int)>& body) {
  return launch::fork_ranks(n, deadline, body);
}

int killed_peer_scenario(Communicator& comm, const std::string& collective) {
  comm.barrier().wait();
  if (comm.rank() == 1) ::raise(SIGKILL);
  std::vector<float> shard(1 << 16, 1.f), full(1 << 17);
  const auto start = std::chrono::steady_clock::now();
  try {
    if (collective == "all_to_all") {
      comm.all_to_all(full.data(), shard.data(), shard.size() / 2, DataType::kFloat32).wait();
    } else {
      comm.all_gather(shard.data(), full.data(), shard.size(), DataType::kFloat32).wait();
    }
    return 2;
  } catch (const PeerLostError& e) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const std::string what = e.what();
    if (!mentions_all(what, {"rank 0", "peer 1", collective})) return 3;
    return elapsed < std::chrono::seconds(5) ? 0 : 4;
  }
}

int size_mismatch_scenario(Transport& t) {
  const int rank = t.rank();
  auto wait = [&](const RequestPtr& r) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r->pending() && std::chrono::steady_clock::now() < end) t.progress();
  };
  auto expect_in = [](const std::string& what, const std::string& needle) {
    if (what.find(needle) != std::string::npos) return 0;
    std::fprintf(stderr, "expected '%s' in: %s\n", needle.c_str(), what.c_str());
    return 3;
  };
  int bad = 0;
  std::vector<float> a(1000, 1.5f), b(1000, 0.f);
  auto s = t.isend(rank, Tag{9, 1}, a.data(), a.size() * sizeof(float));
  auto v = t.irecv(rank, Tag{9, 1}, b.data(), b.size() * sizeof(float));
  bad += !(s->done() && v->done() && b[999] == 1.5f);
  const int other = 1 - rank;
  std::vector<std::byte> big(2 << 20);
  auto r = rank == 0 ? t.isend(other, Tag{9, 2}, big.data(), 1 << 20) : t.irecv(other, Tag{9, 2}, big.data(), 2 << 20);
  wait(r);
  if (!r->failed()) return 2;
  bad += expect_in(r->error(), "message size mismatch: rank 0 sent 1048576 bytes, rank 1 expected 2097152");
  auto e = rank == 0 ? t.isend(other, Tag{9, 3}, big.data(), 8) : t.irecv(other, Tag{9, 3}, big.data(), 16);
  wait(e);
  if (rank == 1) bad += e->failed() ? expect_in(e->error(), "rank 0 sent 8 bytes, rank 1 expected 16") : 4;
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(rank == 0 ? i * 7 + 1 : 0);
  auto ok = rank == 0 ? t.isend(other, Tag{9, 4}, big.data(), big.size())
                      : t.irecv(other, Tag{9, 4}, big.data(), big.size());
  wait(ok);
  bad += ok->done() ? 0 : 5;
  if (rank == 1) {
    for (size_t i = 0; i < big.size(); ++i) {
      if (big[i] != static_cast<std::byte>(i * 7 + 1)) return 6;
    }
  }
  return bad;
}

std::string unique_job_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

bool mentions_all(const std::string& what, std::initializer_list<std::string> needles) {
  for (const std::string& needle : needles) {
    if (what.find(needle) != std::string::npos) continue;
    std::fprintf(stderr, "'%s' missing from: %s\n", needle.c_str(), what.c_str());
    return false;
  }
  return true;
}

int memfd_mappings(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find("memfd:" + name) != std::string::npos;
  return count;
}

std::set<std::string> left_in_dev_shm(const std::string& prefix) {
  const std::string mine = "fsdp-" + unique_job_name(prefix);
  const std::string start = mine.substr(0, mine.rfind('-') + 1);  // "fsdp-<prefix>-<pid>-"
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(start, 0) == 0) names.insert(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

std::vector<DataType> all_data_types() {
  std::vector<DataType> all;
  for (int i = 0; i < kNumDataTypes; ++i) all.push_back(static_cast<DataType>(i));
  return all;
}

std::vector<ReduceOp> all_reduce_ops() {
  return {{ReduceKind::kSum, 1}, {ReduceKind::kProd, 1}, {ReduceKind::kMax, 1},
          {ReduceKind::kMin, 1}, {ReduceKind::kAvg, 1},  {ReduceKind::kPremulSum, 2.0}};
}

namespace {
int check(const std::string& what, const std::string& diff) {
  if (diff.empty()) return 0;
  std::fprintf(stderr, "%s: %s\n", what.c_str(), diff.c_str());
  return 1;
}
}  // namespace

int run_collectives_suite(Communicator& comm, int rank, int n) {
  int bad = 0;
  // The large count spans several 512 KiB chunks per rank's block (f32); under a sanitizer it spans
  // two, which exercises the same pipelining at half the cost (every rank computes the reference).
  const size_t large = kUnderSanitizer ? 140000 : 300000;
  for (size_t count : {size_t{1}, size_t{1000}, large}) {
    for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32}) {
      const std::string tag = std::string(name(t)) + " count " + std::to_string(count);
      const size_t elem = element_size(t);
      std::vector<std::vector<std::byte>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, ReduceKind::kSum, r, count * n));
      const auto want = reference_reduce(t, ReduceOp::sum(), inputs, count * n);
      const auto& mine = inputs[rank];

      std::vector<std::byte> out(count * n * elem);
      comm.all_reduce(mine.data(), out.data(), count * n, t, ReduceOp::sum()).wait();
      bad += check("all_reduce " + tag, compare(out.data(), want.data(), count * n, t));

      std::vector<std::byte> shard(count * elem);
      comm.reduce_scatter(mine.data(), shard.data(), count, t, ReduceOp::sum()).wait();
      bad += check("reduce_scatter " + tag, compare(shard.data(), want.data() + rank * count * elem, count, t));

      comm.all_gather(mine.data(), out.data(), count, t).wait();
      std::vector<std::byte> gathered;
      for (int r = 0; r < n; ++r) gathered.insert(gathered.end(), inputs[r].begin(), inputs[r].begin() + count * elem);
      bad += check("all_gather " + tag, compare(out.data(), gathered.data(), count * n, t));

      const int root = static_cast<int>(count % n);
      std::vector<std::byte> b = rank == root ? inputs[root] : std::vector<std::byte>(count * n * elem);
      comm.broadcast(b.data(), b.data(), count * n, t, root).wait();
      bad += check("broadcast " + tag, compare(b.data(), inputs[root].data(), count * n, t));

      std::vector<std::byte> red(count * n * elem);
      comm.reduce(mine.data(), red.data(), count * n, t, ReduceOp::sum(), root).wait();
      if (rank == root) bad += check("reduce " + tag, compare(red.data(), want.data(), count * n, t));

      std::vector<std::byte> got(count * elem);
      Work s = comm.send(mine.data(), count, t, (rank + 1) % n);
      Work v = comm.recv(got.data(), count, t, (rank - 1 + n) % n);
      s.wait();
      v.wait();
      bad += check("send/recv " + tag, compare(got.data(), inputs[(rank - 1 + n) % n].data(), count, t));
      comm.barrier().wait();
    }
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace fsdp::testing
