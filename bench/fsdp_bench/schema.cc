#include "bench/fsdp_bench/schema.h"

#include <cmath>
#include <algorithm>
#include <stdexcept>

#include "bench/fsdp_bench/collective.h"
#include "common/dtype.h"

namespace fsdp::bench {
namespace {

using json::Value;
using Kind = Value::Kind;

struct Violation {
  std::string what;
};

class Checker {
 public:
  // The member `key` of `v` (at `path`) must exist with kind `k` (or be null when nullable).
  const Value& field(const Value& v, const std::string& path, const char* key, Kind k, bool nullable = false) {
    if (v.kind != Kind::kObject) fail(path, "expected an object");
    const Value* f = v.find(key);
    const std::string at = path.empty() ? key : path + "." + key;
    if (!f) fail(at, "missing");
    if (f->kind == k || (nullable && f->is_null())) return *f;
    fail(at, std::string("expected ") + kind_name(k) + (nullable ? " or null" : ""));
  }
  double count(const Value& v, const std::string& path, const char* key, double lo) {
    const double x = field(v, path, key, Kind::kNumber).num;
    if (x < lo || x != std::floor(x)) fail(path + "." + key, "expected an integer >= " + number_text(lo));
    return x;
  }
  [[noreturn]] void fail(const std::string& path, const std::string& what) { throw Violation{path + ": " + what}; }

 private:
  static const char* kind_name(Kind k) {
    switch (k) {
      case Kind::kNull: return "null";
      case Kind::kBool: return "a boolean";
      case Kind::kNumber: return "a number";
      case Kind::kString: return "a string";
      case Kind::kArray: return "an array";
      case Kind::kObject: return "an object";
    }
    return "?";
  }
  static std::string number_text(double x) { return std::to_string(static_cast<long long>(x)); }
};

void check_measurement(Checker& c, const Value& m, const std::string& path) {
  const bool ran = c.field(m, path, "ran", Kind::kBool).b;
  c.field(m, path, "skipped", Kind::kString, true);
  for (const char* k : {"time_us", "algbw_gbs", "busbw_gbs"}) {
    const double x = c.field(m, path, k, Kind::kNumber).num;
    if (x < 0) c.fail(path + "." + k, "negative");
  }
  const Value& wrong = c.field(m, path, "wrong", Kind::kNumber, true);
  if (!wrong.is_null() && (wrong.num < 0 || !ran)) c.fail(path + ".wrong", "a count >= 0, and only where it ran");
  c.field(m, path, "iter_min_us", Kind::kNumber, true);
  c.field(m, path, "iter_max_us", Kind::kNumber, true);
  if (!ran && c.field(m, path, "skipped", Kind::kString, true).is_null()) c.fail(path + ".skipped", "says why it did not run");
}

}  // namespace

std::string schema_violation(const Value& doc) {
  Checker c;
  try {
    if (c.field(doc, "", "schema", Kind::kString).str != kSchemaName) c.fail("schema", std::string("expected ") + kSchemaName);
    c.field(doc, "", "command", Kind::kString);
    const std::string& coll = c.field(doc, "", "collective", Kind::kString).str;
    if (!parse_collective(coll)) c.fail("collective", "unknown collective '" + coll + "'");
    const double n = c.count(doc, "", "nranks", 1);
    const Value& o = c.field(doc, "", "options", Kind::kObject);
    for (const char* k : {"min_bytes", "max_bytes", "step_bytes", "iters", "warmup_iters", "check_iters", "root"}) {
      c.count(o, "options", k, 0);
    }
    c.field(o, "options", "step_factor", Kind::kNumber);
    c.field(o, "options", "blocking", Kind::kBool);
    if (c.count(o, "options", "average", 0) > 3) c.fail("options.average", "expected 0..3");
    c.field(o, "options", "huge_pages", Kind::kBool);
    for (const char* k : {"datatypes", "ops"}) {
      for (const Value& t : c.field(o, "options", k, Kind::kArray).items) {
        if (t.kind != Kind::kString) c.fail(std::string("options.") + k, "expected strings");
      }
    }
    const Value& m = c.field(doc, "", "machine", Kind::kObject);
    c.field(m, "machine", "cpu", Kind::kString);
    c.count(m, "machine", "cpus", 1);
    c.field(m, "machine", "kernel", Kind::kString);
    c.field(m, "machine", "hostname", Kind::kString);
    const auto& ranks = c.field(doc, "", "ranks", Kind::kArray).items;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string p = "ranks[" + std::to_string(i) + "]";
      c.count(ranks[i], p, "rank", 0);
      c.count(ranks[i], p, "pid", 0);
      c.field(ranks[i], p, "host", Kind::kString);
      c.field(ranks[i], p, "cpus", Kind::kString);
    }
    if (ranks.size() != static_cast<size_t>(n)) c.fail("ranks", "expected one entry per rank");
    std::vector<std::string> names;
    const auto& backends = c.field(doc, "", "backends", Kind::kArray).items;
    for (size_t i = 0; i < backends.size(); ++i) {
      const std::string p = "backends[" + std::to_string(i) + "]";
      names.push_back(c.field(backends[i], p, "name", Kind::kString).str);
      const bool available = c.field(backends[i], p, "available", Kind::kBool).b;
      c.field(backends[i], p, "describe", Kind::kString);
      const Value& why = c.field(backends[i], p, "unavailable", Kind::kString, true);
      if (available == !why.is_null()) c.fail(p + ".unavailable", "a reason exactly when not available");
      c.field(backends[i], p, "avg_busbw_gbs", Kind::kNumber);
      c.field(backends[i], p, "wrong", Kind::kNumber, true);
    }
    const auto& rows = c.field(doc, "", "rows", Kind::kArray).items;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string p = "rows[" + std::to_string(i) + "]";
      const std::string& b = c.field(rows[i], p, "backend", Kind::kString).str;
      if (std::find(names.begin(), names.end(), b) == names.end()) c.fail(p + ".backend", "not in backends: '" + b + "'");
      c.count(rows[i], p, "bytes", 0);
      c.count(rows[i], p, "count", 0);
      const std::string& t = c.field(rows[i], p, "type", Kind::kString).str;
      if (!parse_data_type(t)) c.fail(p + ".type", "unknown type '" + t + "'");
      c.field(rows[i], p, "redop", Kind::kString, true);
      c.field(rows[i], p, "root", Kind::kNumber);
      check_measurement(c, c.field(rows[i], p, "out_of_place", Kind::kObject), p + ".out_of_place");
      check_measurement(c, c.field(rows[i], p, "in_place", Kind::kObject), p + ".in_place");
    }
  } catch (const Violation& v) {
    return v.what;
  }
  return {};
}

}  // namespace fsdp::bench
