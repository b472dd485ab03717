// The --json document's schema ("fsdp-bench/1"), as code: docs/benchmarks.md describes each field,
// the schema test and the report tool check documents against this.
#pragma once

#include <string>

#include "common/json.h"

namespace fsdp::bench {

inline constexpr const char* kSchemaName = "fsdp-bench/1";

// Empty when `doc` follows the schema; else the first violation, with its path
// ("rows[3].out_of_place.busbw_gbs: expected a number").
std::string schema_violation(const json::Value& doc);

}  // namespace fsdp::bench
