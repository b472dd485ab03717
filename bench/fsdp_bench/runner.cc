#include "bench/fsdp_bench/runner.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "bench/fsdp_bench/data_check.h"

namespace fsdp::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::byte* map_buffer(size_t bytes, bool huge_pages) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes for the buffers");
  if (huge_pages) ::madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);  // fault every page in now, not inside the first timed row
  return static_cast<std::byte*>(p);
}

// This rank's share of the row's time, and every rank's combined by -a.
double aggregate(Backend& b, double mine, Aggregation how) {
  const int n = b.size();
  switch (how) {
    case Aggregation::kRank0: {
      double v = b.rank() == 0 ? mine : 0;
      b.combine(&v, 1, Backend::Combine::kSum);
      return v;
    }
    case Aggregation::kMin: b.combine(&mine, 1, Backend::Combine::kMin); return mine;
    case Aggregation::kMax: b.combine(&mine, 1, Backend::Combine::kMax); return mine;
    case Aggregation::kMean: break;
  }
  b.combine(&mine, 1, Backend::Combine::kSum);
  return mine / n;
}

struct Timing {
  double seconds = 0;  // this rank's figure
  double min = -1, max = -1;
};

// Times `iters` runs of `one` (which starts one call) per the options: each alone between barriers
// with -z 1, back to back with -z 0.
template <typename Start>
Timing time_iterations(const Options& o, Backend& b, Start start) {
  for (int i = 0; i < o.warmup_iters; ++i) {
    start();
    if (o.blocking) b.wait_all();
  }
  b.wait_all();
  Timing t;
  if (o.blocking) {
    std::vector<double> each;
    for (int i = 0; i < o.iters; ++i) {
      b.barrier();
      const auto t0 = Clock::now();
      start();
      b.wait_all();
      each.push_back(seconds_since(t0));
    }
    std::sort(each.begin(), each.end());
    t.seconds = each[each.size() / 2];
    t.min = each.front();
    t.max = each.back();
  } else {
    b.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) start();
    b.wait_all();
    t.seconds = seconds_since(t0) / o.iters;
  }
  return t;
}

void finish(Measurement& m, const Options& o, Backend& b, const Timing& t, size_t bytes, double factor) {
  m.ran = true;
  const double s = aggregate(b, t.seconds, o.aggregation);
  m.time_us = s * 1e6;
  if (o.blocking) {
    double lo = t.min, hi = t.max;
    b.combine(&lo, 1, Backend::Combine::kMin);
    b.combine(&hi, 1, Backend::Combine::kMax);
    m.iter_min_us = lo * 1e6;
    m.iter_max_us = hi * 1e6;
  }
  m.algbw = s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
  m.busbw = m.algbw * factor;
}

Measurement measure(const Options& o, Backend& b, Buffers& buf, const Case& c, const Geometry& g, bool in_place,
                    size_t bytes) {
  Measurement m;
  const int rank = b.rank(), n = b.size();
  if (in_place && !has_in_place(c.collective)) {
    m.skipped = "no in-place form";
    return m;
  }
  m.skipped = b.unsupported(c.collective, c.type, c.op, in_place);
  if (!m.skipped.empty()) return m;
  const size_t elem = element_size(c.type);
  const Backend::BufferPair own = b.registered_buffers();
  std::byte* send = own.send ? own.send : buf.send();
  std::byte* recv = own.recv ? own.recv : buf.recv();
  CallArgs args{c.collective, c.type, c.op, c.root, send, recv, g.param_count, in_place};
  if (in_place) {
    if (g.in_place_in_recv) {
      args.send = recv + g.in_place_offset * elem;
    } else {
      args.send = send;
      args.recv = send + g.in_place_offset * elem;
    }
  }
  b.setup(args);
  const Timing t = time_iterations(o, b, [&] { b.start(args); });
  finish(m, o, b, t, bytes, bus_factor(c.collective, n));
  if (o.check_iters > 0) {
    double wrong = 0;
    for (int i = 0; i < o.check_iters; ++i) {
      prepare_check(c, g, rank, n, in_place, const_cast<std::byte*>(args.send), args.recv);
      b.barrier();  // no rank's inputs change while a peer may still read them
      b.start(args);
      b.wait_all();
      wrong += static_cast<double>(count_wrong(c, g, rank, n, b.result(args, g.param_count * elem)));
    }
    b.combine(&wrong, 1, Backend::Combine::kSum);
    m.wrong = static_cast<long long>(wrong);
  }
  return m;
}

}  // namespace

const std::byte* Backend::result(const CallArgs& args, size_t) const { return args.recv; }

Buffers::Buffers(size_t bytes, bool huge_pages) : bytes_(std::max<size_t>(bytes, 4096)) {
  send_ = map_buffer(bytes_, huge_pages);
  recv_ = map_buffer(bytes_, huge_pages);
}

Buffers::~Buffers() {
  ::munmap(send_, bytes_);
  ::munmap(recv_, bytes_);
}

size_t buffer_bytes(const Options& o, int n) {
  const double factor = std::max(1.0, bus_factor(o.collective, n));
  return static_cast<size_t>(std::ceil(static_cast<double>(o.max_bytes) * factor)) + 64;
}

namespace {

Row row_header(const Options& o, const std::string& backend, size_t size, DataType t, ReduceKind op, int n, int rank) {
  const size_t elem = element_size(t);
  const Geometry g = geometry(o.collective, size, elem, n, rank);
  Row row;
  row.backend = backend;
  row.collective = o.collective;
  row.count = g.count;
  row.bytes = g.count * elem;
  row.type = t;
  row.has_op = has_reduction(o.collective) && backend != "memcpy" && backend != kAddBound;
  row.op = op;
  row.root = has_root(o.collective) ? o.root : -1;
  return row;
}

Row backend_row(const Options& o, Backend& b, Buffers& buf, size_t size, DataType t, ReduceKind op) {
  Row row = row_header(o, b.name(), size, t, op, b.size(), b.rank());
  const Geometry g = geometry(o.collective, size, element_size(t), b.size(), b.rank());
  const Case c{o.collective, t, op, o.root};
  row.out_of_place = measure(o, b, buf, c, g, false, row.bytes);
  row.in_place = measure(o, b, buf, c, g, true, row.bytes);
  return row;
}

Row memcpy_row(const Options& o, Backend& control, Buffers& buf, size_t size, DataType t) {
  const int n = control.size();
  const double factor = bus_factor(o.collective, n);
  Row row = row_header(o, "memcpy", size, t, ReduceKind::kSum, n, control.rank());
  // The bytes a rank must receive: what busbw counts. (A 1-rank job receives nothing: copy the
  // buffer once so the row still says what a copy costs.)
  const size_t copy = n > 1 ? static_cast<size_t>(static_cast<double>(row.bytes) * factor) : row.bytes;
  const double shown_factor = n > 1 ? factor : 1.0;
  for (Measurement* m : {&row.out_of_place, &row.in_place}) {
    const Timing timing = time_iterations(o, control, [&] { std::memcpy(buf.recv(), buf.send(), copy); });
    finish(*m, o, control, timing, row.bytes, shown_factor);
  }
  return row;
}

// x[i] += y[i] in T's own arithmetic: a plain loop the compiler vectorises, independent of the
// collectives' reduction kernels it bounds.
template <typename T>
void add_into(std::byte* x, const std::byte* y, size_t count) {
  T* __restrict dst = reinterpret_cast<T*>(x);
  const T* __restrict src = reinterpret_cast<const T*>(y);
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

// The reduction bound: every rank at once adds size * bus factor bytes of y into x, the bytes a
// reducing rank must combine, so its busbw is the in-run bandwidth of x[i] += y[i]. fp32 and fp64
// only (the narrow floats' bound would be the widening, not the add): nullopt for the rest.
std::optional<Row> add_row(const Options& o, Backend& control, Buffers& buf, size_t size, DataType t) {
  if (t != DataType::kFloat32 && t != DataType::kFloat64) return std::nullopt;
  const int n = control.size();
  const double factor = bus_factor(o.collective, n);
  Row row = row_header(o, kAddBound, size, t, ReduceKind::kSum, n, control.rank());
  const size_t bytes = n > 1 ? static_cast<size_t>(static_cast<double>(row.bytes) * factor) : row.bytes;
  const double shown_factor = n > 1 ? factor : 1.0;
  const size_t count = bytes / element_size(t);
  for (Measurement* m : {&row.out_of_place, &row.in_place}) {
    const Timing timing = time_iterations(o, control, [&] {
      if (t == DataType::kFloat32) add_into<float>(buf.recv(), buf.send(), count);
      else add_into<double>(buf.recv(), buf.send(), count);
    });
    finish(*m, o, control, timing, row.bytes, shown_factor);
  }
  return row;
}

}  // namespace

std::vector<Row> run_interleaved(const Options& o, const std::vector<Backend*>& backends, Backend* memcpy_control,
                                 Buffers& buf) {
  std::vector<Row> rows;
  const std::vector<ReduceKind> none{ReduceKind::kSum};
  const auto& ops = has_reduction(o.collective) ? o.ops : none;
  for (size_t size : sweep_sizes(o)) {
    for (DataType t : o.types) {
      for (ReduceKind op : ops) {
        for (Backend* b : backends) rows.push_back(backend_row(o, *b, buf, size, t, op));
        if (memcpy_control && op == ops.front()) {
          rows.push_back(memcpy_row(o, *memcpy_control, buf, size, t));
          if (has_reduction(o.collective)) {
            if (auto add = add_row(o, *memcpy_control, buf, size, t)) rows.push_back(std::move(*add));
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace fsdp::bench
