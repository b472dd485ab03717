// The store's keys and values and what each request does to them, with no connection: the server
// (store_server.cc) hands every parsed request to apply(), and so does the fuzz target fuzz/store_frame.cc,
// so the operations under the fuzzer (counters, compare-and-set, parking) are the ones that serve.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace fsdp::proto {
class StoreRequest;
class StoreResponse;
}  // namespace fsdp::proto

namespace fsdp::launch {

class StoreData {
 public:
  struct Outcome {
    bool park = false;     // a GET or WAIT whose keys are not all held: nothing changed, no response yet
    bool created = false;  // a key was created: parked requests may now be answered
  };

  // Applies `request` (proto/store.proto gives each op's semantics) and fills `response`, unless the
  // request must park. A malformed request (store_request_error), an ADD on a value that is not a
  // decimal int64 or past int64 are answered STATUS_INVALID_ARGUMENT, naming the key. A SET's value
  // is moved out of `request`. A parked request applied again once its keys exist gets its answer.
  Outcome apply(proto::StoreRequest& request, proto::StoreResponse* response);

  // The keys of `request` not held, in request order.
  std::vector<std::string> missing_keys(const proto::StoreRequest& request) const;

  size_t size() const { return values_.size(); }

 private:
  std::unordered_map<std::string, std::string> values_;
};

}  // namespace fsdp::launch
