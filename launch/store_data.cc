#include "launch/store_data.h"

#include <charconv>

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
  for (const std::string& key : request.keys()) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return missing;
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
      const std::string& key = request.keys(0);
      auto it = values_.find(key);
      int64_t current = 0;
      if (it != values_.end() && !parse_int64(it->second, &current)) {
        reject(response, "store_add on key '" + key + "', which holds '" + it->second.substr(0, 64) +
                             "', not a decimal int64 counter");
        break;
      }
      int64_t next = 0;
      if (__builtin_add_overflow(current, request.delta(), &next)) {
        reject(response, "store_add on key '" + key + "' overflows int64: " + std::to_string(current) + " + " +
                             std::to_string(request.delta()));
        break;
      }
      if (it == values_.end()) {
        values_.emplace(key, std::to_string(next));
        outcome.created = true;
      } else {
        it->second = std::to_string(next);
      }
      response->set_number(next);
      break;
    }
    case StoreRequest::OP_COMPARE_SET: {
      const std::string& key = request.keys(0);
      auto it = values_.find(key);
      const std::string current = it == values_.end() ? std::string() : it->second;
      if (current != request.expected()) {
        response->set_value(current);
        break;
      }
      response->set_value(request.desired());
      if (it == values_.end()) {
        values_.emplace(key, request.desired());
        outcome.created = true;
      } else {
        it->second = request.desired();
      }
      break;
    }
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
