#include "collectives/transports/address_exchange.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "collectives/types/errors.h"
#include "common/atomic_file.h"

namespace fsdp {

AddressExchange directory_exchange(std::string dir, int rank, int size, std::chrono::milliseconds timeout) {
  return [dir = std::move(dir), rank, size, timeout](const std::string& mine) {
    const std::string path = dir + "/" + std::to_string(rank);
    if (const std::string error = write_file_atomically(path, mine); !error.empty()) {
      throw CommError(ErrorContext{rank, -1, "address_exchange", 0, 0}, "cannot publish this rank's address: " + error);
    }
    std::vector<std::string> all(size);
    std::vector<bool> have(size, false);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int missing = size; missing > 0;) {
      for (int r = 0; r < size; ++r) {
        if (have[r]) continue;
        std::ifstream in(dir + "/" + std::to_string(r));
        if (!in) continue;
        all[r].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        have[r] = true;
        --missing;
      }
      if (missing == 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string ranks;
        for (int r = 0; r < size; ++r) {
          if (!have[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        }
        throw TimeoutError(ErrorContext{rank, -1, "address_exchange", 0, 0},
                           "ranks " + ranks + " never published an address in " + dir + " within " +
                               std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return all;
  };
}

std::string hex_encode(const void* data, size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out(bytes * 2, '0');
  for (size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::vector<std::byte> hex_decode(const std::string& text) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw InvalidArgument("hex_decode: '" + std::string(1, c) + "' is not a hex digit");
  };
  if (text.size() % 2 != 0) throw InvalidArgument("hex_decode: odd length " + std::to_string(text.size()));
  std::vector<std::byte> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::byte>(digit(text[2 * i]) << 4 | digit(text[2 * i + 1]));
  }
  return out;
}

}  // namespace fsdp
