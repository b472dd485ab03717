#include "bench/fsdp_bench/data_check.h"

#include <cstdint>
#include <cstring>

#include "common/splitmix.h"
#include "common/float_formats.h"

namespace fsdp::bench {
namespace {

uint64_t hash(uint64_t r, uint64_t i) { return splitmix64((r << 40) ^ i); }

// Element `i` of what rank `r` contributes to a data mover.
void put_pattern(std::byte* dst, size_t elem, int r, size_t i) {
  const uint64_t h = hash(static_cast<uint64_t>(r), i);
  std::memcpy(dst, &h, elem);
}

// The small integer rank r contributes at element i of a reduction. Sums stay exact in every type
// and every order for up to 8 ranks (fp8 e5m2 holds the integers only up to 8: it gets 0 or 1).
int64_t term(ReduceKind op, DataType t, int r, size_t i) {
  switch (op) {
    case ReduceKind::kProd: return 1 + ((r + i) % 3 == 0 ? 1 : 0);
    case ReduceKind::kMax:
    case ReduceKind::kMin: return static_cast<int64_t>((r * 5 + i * 11) % 16);  // rounding is monotonic
    default: return static_cast<int64_t>((r * 3 + i * 7) % (t == DataType::kFloat8E5M2 ? 2 : 4));
  }
}

// Writes the value v (exact in every type) as type t; for averages `avg` is applied in the
// accumulate type: f32 for f32 and the narrow floats, f64 for f64, truncating integer division.
void put_value(std::byte* dst, DataType t, int64_t v, int divisor) {
  auto narrow = [&](float f) {
    switch (t) {
      case DataType::kFloat16: {
        const uint16_t h = float_to_half(f);
        std::memcpy(dst, &h, 2);
        break;
      }
      case DataType::kBfloat16: {
        const uint16_t b = float_to_bf16(f);
        std::memcpy(dst, &b, 2);
        break;
      }
      case DataType::kFloat8E4M3: dst[0] = static_cast<std::byte>(float_to_e4m3(f)); break;
      case DataType::kFloat8E5M2: dst[0] = static_cast<std::byte>(float_to_e5m2(f)); break;
      default: std::memcpy(dst, &f, 4); break;
    }
  };
  switch (t) {
    case DataType::kFloat64: {
      const double d = static_cast<double>(v) / divisor;
      std::memcpy(dst, &d, 8);
      return;
    }
    case DataType::kFloat32:
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      narrow(divisor == 1 ? static_cast<float>(v) : static_cast<float>(v) / static_cast<float>(divisor));
      return;
    default: {
      // Two's complement truncation to the element width, as the wrapping integer kernels do.
      const uint64_t u = static_cast<uint64_t>(v / divisor);
      std::memcpy(dst, &u, element_size(t));  // little endian: the low bytes
      return;
    }
  }
}

// The exact combination over ranks of element i.
int64_t combine(ReduceKind op, DataType t, int n, size_t i) {
  int64_t acc = term(op, t, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = term(op, t, r, i);
    switch (op) {
      case ReduceKind::kProd: acc *= v; break;
      case ReduceKind::kMax: acc = v > acc ? v : acc; break;
      case ReduceKind::kMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  return acc;
}

void fill_terms(const Case& c, int rank, std::byte* dst, size_t count, size_t first_index) {
  const size_t elem = element_size(c.type);
  for (size_t i = 0; i < count; ++i) put_value(dst + i * elem, c.type, term(c.op, c.type, rank, first_index + i), 1);
}

void fill_pattern(const Case& c, int rank, std::byte* dst, size_t count, size_t first_index) {
  const size_t elem = element_size(c.type);
  for (size_t i = 0; i < count; ++i) put_pattern(dst + i * elem, elem, rank, first_index + i);
}

void poison(std::byte* p, size_t bytes) {
  if (p && bytes) std::memset(p, 0xa5, bytes);
}

}  // namespace

size_t result_count(const Case& c, const Geometry& g, int rank) {
  if (c.collective == Collective::kReduce && rank != c.root) return 0;
  return g.recv_count;
}

void prepare_check(const Case& c, const Geometry& g, int rank, int n, bool in_place, std::byte* send,
                   std::byte* recv) {
  (void)n;
  const size_t elem = element_size(c.type);
  if (!in_place) poison(recv, g.recv_count * elem);
  switch (c.collective) {
    case Collective::kAllGather:
      if (in_place) poison(recv, g.recv_count * elem);
      fill_pattern(c, rank, send, g.send_count, 0);
      break;
    case Collective::kBroadcast:
      if (rank == c.root) {
        fill_pattern(c, c.root, send, g.send_count, 0);
      } else if (in_place) {
        poison(recv, g.recv_count * elem);
      }
      break;
    case Collective::kSendRecv: fill_pattern(c, rank, send, g.send_count, 0); break;
    case Collective::kAllToAll:
      // Block p of rank r's send goes to rank p: the pattern of (r, p * block + i).
      fill_pattern(c, rank, send, g.send_count, 0);
      break;
    default: fill_terms(c, rank, send, g.send_count, 0); break;
  }
}

size_t count_wrong(const Case& c, const Geometry& g, int rank, int n, const std::byte* result) {
  const size_t elem = element_size(c.type);
  const size_t count = result_count(c, g, rank);
  std::byte want[8];
  size_t wrong = 0;
  const size_t block = g.param_count;
  for (size_t i = 0; i < count; ++i) {
    switch (c.collective) {
      case Collective::kAllGather: put_pattern(want, elem, static_cast<int>(i / block), i % block); break;
      case Collective::kBroadcast: put_pattern(want, elem, c.root, i); break;
      case Collective::kSendRecv: put_pattern(want, elem, (rank - 1 + n) % n, i); break;
      case Collective::kAllToAll:
        put_pattern(want, elem, static_cast<int>(i / block), static_cast<size_t>(rank) * block + i % block);
        break;
      default: {
        const size_t global = c.collective == Collective::kReduceScatter ? rank * block + i : i;
        put_value(want, c.type, combine(c.op, c.type, n, global), c.op == ReduceKind::kAvg ? n : 1);
        break;
      }
    }
    wrong += std::memcmp(result + i * elem, want, elem) != 0;
  }
  return wrong;
}

}  // namespace fsdp::bench
