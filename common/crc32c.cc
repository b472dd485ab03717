#include "common/crc32c.h"

#include <array>
#include <cstring>

namespace fsdp {
namespace {

// table[k][b]: the CRC of byte b followed by k zero bytes, so 8 input bytes fold in 8 lookups.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (bytes >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);  // little-endian hosts only (checked in checkpointer.cc)
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^ kTables[4][lo >> 24] ^
        kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^ kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    bytes -= 8;
  }
  while (bytes-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

}  // namespace fsdp
