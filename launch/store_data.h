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
    bool park = false;     // a GET or WAIT whose keys are not all held, a VOTE whose decision is missing (counted)
    bool created = false;  // a key was created: parked requests may now be answered
  };

  // Applies `request` (proto/store.proto gives each op's semantics) and fills `response`, unless the
  // request must park. A malformed request (store_request_error), an ADD on a value that is not a
  // decimal int64 or past int64 are answered STATUS_INVALID_ARGUMENT, naming the key. A SET's value
  // is moved out of `request`. A parked request applied again once its keys exist gets its answer (a
  // VOTE is rewritten as it parks, so that it is counted once).
  Outcome apply(proto::StoreRequest& request, proto::StoreResponse* response);

  // The keys of `request` not held, in request order; of a VOTE, its decision only (what it parks on).
  std::vector<std::string> missing_keys(const proto::StoreRequest& request) const;

  size_t size() const { return values_.size(); }

 private:
  // OP_ADD's arithmetic on the counter at key: false (response rejected) for a value that is not a
  // decimal int64 or an overflow; else *next is the new value.
  bool add(const std::string& key, int64_t delta, proto::StoreResponse* response, Outcome* outcome, int64_t* next);
  // OP_VOTE's: counts it once, decides at the target; false while the decision is missing (it parks).
  bool vote(proto::StoreRequest& request, proto::StoreResponse* response, Outcome* outcome);
  // OP_COMPARE_SET's: the key's value after the call.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                          Outcome* outcome);

  std::unordered_map<std::string, std::string> values_;
};

}  // namespace fsdp::launch
