// SplitMix64's finaliser: a fixed bijection of 64-bit words that scatters every input bit over the
// output. The project's seeded data, initialisation, test values and tag contexts derive from it, so a
// value is computed from its coordinates alone (counter-based), never by replaying a stream.
#pragma once

#include <cstdint>

namespace fsdp {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace fsdp
