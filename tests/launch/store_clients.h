// A client of an in-process store server with short bounds (5 s), for the store protocol tests.
#pragma once

#include <chrono>
#include <memory>

#include "launch/store.h"

namespace fsdp::launch::testing {

inline std::unique_ptr<StoreClient> client_of(const StoreServer& server) {
  StoreClientOptions options;
  options.connect_timeout = std::chrono::seconds(5);
  options.timeout = std::chrono::seconds(5);
  return std::make_unique<StoreClient>("127.0.0.1", server.port(), options);
}

}  // namespace fsdp::launch::testing
