#include "launch/store_data.h"

#include <charconv>

#include "launch/key_value_store.h"
#include "launch/store_frame.h"
#include "proto/store.pb.h"

namespace fsdp::launch {
namespace {

using proto::StoreRequest;
using proto::StoreResponse;

// The whole string must be a decimal int64; "12abc" or "" is not a counter.
bool parse_int64(const std::string& text, int64_t* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

void reject(StoreResponse* response, const std::string& why) {
  response->set_status(StoreResponse::STATUS_INVALID_ARGUMENT);
  response->set_error(why);
}

}  // namespace

std::vector<std::string> StoreData::missing_keys(const StoreRequest& request) const {
  std::vector<std::string> missing;
  if (request.op() == StoreRequest::OP_VOTE) {  // waits on its decision only: the counters read 0 when missing
    if (request.keys_size() > 1 && !values_.contains(request.keys(1))) missing.push_back(request.keys(1));
    return missing;
  }
  for (const std::string& key : request.keys()) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return missing;
}

bool StoreData::add(const std::string& key, int64_t delta, StoreResponse* response, Outcome* outcome, int64_t* next) {
  auto it = values_.find(key);
  int64_t current = 0;
  if (it != values_.end() && !parse_int64(it->second, &current)) {
    reject(response, "store_add on key '" + key + "', which holds '" + it->second.substr(0, 64) +
                         "', not a decimal int64 counter");
    return false;
  }
  if (__builtin_add_overflow(current, delta, next)) {
    reject(response, "store_add on key '" + key + "' overflows int64: " + std::to_string(current) + " + " +
                         std::to_string(delta));
    return false;
  }
  if (it == values_.end()) {
    values_.emplace(key, std::to_string(*next));
    outcome->created = true;
  } else {
    it->second = std::to_string(*next);
  }
  return true;
}

std::string StoreData::compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                                   Outcome* outcome) {
  auto it = values_.find(key);
  const std::string current = it == values_.end() ? std::string() : it->second;
  if (current != expected) return current;
  if (it == values_.end()) {
    values_.emplace(key, desired);
    outcome->created = true;
  } else {
    it->second = desired;
  }
  return desired;
}

bool StoreData::vote(StoreRequest& request, StoreResponse* response, Outcome* outcome) {
  if (request.delta() != 0) {
    // The snapshot is read before counting, so a counter that is not one refuses the vote uncounted;
    // it is the same instant as the completion (one thread applies every request).
    int64_t snapshot = 0;
    if (request.keys_size() == 3) {
      auto it = values_.find(request.keys(2));
      if (it != values_.end() && !parse_int64(it->second, &snapshot)) {
        reject(response, "store_vote's snapshot counter '" + request.keys(2) + "' holds '" + it->second.substr(0, 64) +
                             "', not a decimal int64 counter");
        return true;
      }
    }
    int64_t count = 0;
    if (!add(request.keys(0), request.delta(), response, outcome, &count)) return true;
    if (count == request.target()) {
      const std::string& value = request.desired();
      compare_set(request.keys(1), "", request.keys_size() == 3 ? vote_decision(value, snapshot) : value, outcome);
    }
    request.set_delta(0);  // counted: applied again once the decision exists, it only reads it
  }
  auto it = values_.find(request.keys(1));
  if (it == values_.end()) return false;
  response->set_value(it->second);
  return true;
}

StoreData::Outcome StoreData::apply(StoreRequest& request, StoreResponse* response) {
  Outcome outcome;
  if (const std::string why = store_request_error(request); !why.empty()) {
    reject(response, why);
    return outcome;
  }
  switch (request.op()) {
    case StoreRequest::OP_SET:
      outcome.created = values_.insert_or_assign(request.keys(0), std::move(*request.mutable_value())).second;
      break;
    case StoreRequest::OP_WAIT:
    case StoreRequest::OP_GET:
      if (!missing_keys(request).empty()) {
        outcome.park = true;
        break;
      }
      if (request.op() == StoreRequest::OP_GET) response->set_value(values_.at(request.keys(0)));
      break;
    case StoreRequest::OP_ADD: {
      int64_t next = 0;
      if (add(request.keys(0), request.delta(), response, &outcome, &next)) response->set_number(next);
      break;
    }
    case StoreRequest::OP_COMPARE_SET:
      response->set_value(compare_set(request.keys(0), request.expected(), request.desired(), &outcome));
      break;
    case StoreRequest::OP_VOTE:
      outcome.park = !vote(request, response, &outcome);
      break;
    case StoreRequest::OP_DELETE:
      response->set_number(static_cast<int64_t>(values_.erase(request.keys(0))));
      break;
    case StoreRequest::OP_NUM_KEYS:
      response->set_number(static_cast<int64_t>(values_.size()));
      break;
    default:  // refused by store_request_error above
      break;
  }
  return outcome;
}

}  // namespace fsdp::launch
