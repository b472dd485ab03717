// The schema of fsdp-bench's JSON report and its reader (the JSON itself: tests/common/json_test.cc).
#include "bench/fsdp_bench/schema.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "bench/fsdp_bench/report.h"
#include "common/json.h"

namespace fsdp::bench {
namespace {

// A small report in the shape fsdp-bench writes, for the schema tests.
Report sample() {
  Report r;
  r.command = "fsdp-bench all_reduce -b 8 -e 8";
  r.options.collective = Collective::kAllReduce;
  r.nranks = 2;
  r.machine = {"cpu", 2, "6.1", "host"};
  r.ranks = {{0, 10, "host", "0"}, {1, 11, "host", "1"}};
  r.backends = {{"shm", "fsdp over shm", ""}, {"ucx", "", "not built"}};
  Row row;
  row.backend = "shm";
  row.collective = Collective::kAllReduce;
  row.bytes = 8;
  row.count = 2;
  row.type = DataType::kFloat32;
  row.has_op = true;
  row.out_of_place = {true, "", 1.0, -1, -1, 0.008, 0.008, 0};
  row.in_place = {true, "", 1.1, 0.9, 1.5, 0.007, 0.007, 0};
  r.rows.push_back(row);
  return r;
}

TEST(Schema, WhatFsdpBenchWritesFollowsIt) {
  const std::string text = format_json(sample());
  EXPECT_EQ(schema_violation(json::parse(text)), "");
  const Report back = report_from_json(text);
  ASSERT_EQ(back.rows.size(), 1u);
  EXPECT_EQ(back.rows[0].in_place.iter_max_us, 1.5);
  EXPECT_EQ(back.backends[1].unavailable, "not built");
}

TEST(Schema, ViolationsAreFoundWithTheirPath) {
  const std::string good = format_json(sample());
  struct Case {
    std::string from, to, says;
  };
  const std::vector<Case> cases = {
      {"\"schema\":\"fsdp-bench/1\"", "\"schema\":\"other\"", "schema: expected fsdp-bench/1"},
      {"\"collective\":\"all_reduce\"", "\"collective\":\"gather\"", "collective: unknown collective"},
      {"\"nranks\":2", "\"nranks\":\"2\"", "nranks: expected a number"},
      {"\"type\":\"float\"", "\"type\":\"float7\"", "rows[0].type: unknown type 'float7'"},
      {"\"busbw_gbs\":0.008", "\"busbw_gbs\":null", "rows[0].out_of_place.busbw_gbs: expected a number"},
      {"\"backend\":\"shm\"", "\"backend\":\"tcp\"", "rows[0].backend: not in backends"},
      {"\"unavailable\":\"not built\"", "\"unavailable\":null", "backends[1].unavailable: a reason"},
      {"{\"rank\":1,", "{\"rank\":-1,", "ranks[1].rank: expected an integer >= 0"},
      {"\"wrong\":0,\"iter_min_us\":null", "\"wrong\":-3,\"iter_min_us\":null", "rows[0].out_of_place.wrong"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const auto at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    const std::string why = schema_violation(json::parse(text));
    EXPECT_NE(why.find(c.says), std::string::npos) << "for " << c.to << " got '" << why << "'";
    EXPECT_THROW(report_from_json(text), std::runtime_error);
  }
}

}  // namespace
}  // namespace fsdp::bench
