// The JSON writer and reader (common/json.h) as fsdp-bench and its report tool use them, and the schema check.
#include <gtest/gtest.h>

#include <stdexcept>

#include "common/json.h"
#include "bench/fsdp_bench/report.h"
#include "bench/fsdp_bench/schema.h"

namespace fsdp::bench {
namespace {

TEST(Json, WriterOutputParsesBack) {
  json::Writer w;
  w.begin_object();
  w.key("s").value("a \"quoted\"\nline\\");
  w.key("n").value(1.5);
  w.key("i").value(int64_t{-7});
  w.key("b").value(true);
  w.key("z").null();
  w.key("a").begin_array().value(1).value("x").begin_object().end_object().end_array();
  w.end_object();
  const json::Value v = json::parse(w.text());
  EXPECT_EQ(v.at("s").string(), "a \"quoted\"\nline\\");
  EXPECT_EQ(v.at("n").number(), 1.5);
  EXPECT_EQ(v.at("i").number(), -7);
  EXPECT_TRUE(v.at("b").boolean());
  EXPECT_TRUE(v.at("z").is_null());
  ASSERT_EQ(v.at("a").array().size(), 3u);
  EXPECT_EQ(v.at("a").array()[1].string(), "x");
  EXPECT_EQ(v.fields.front().first, "s");  // document order kept
}

TEST(Json, NonFiniteNumbersBecomeNull) {
  EXPECT_EQ(json::number(1.0 / 0.0), "null");
  EXPECT_EQ(json::number(0.25), "0.25");
}

TEST(Json, MalformedTextIsRejectedWithItsOffset) {
  for (const char* bad : {"{", "{\"a\":}", "[1,]", "{\"a\" 1}", "\"open", "1 2", "{\"a\":tru}", "[\"\\u12\"]"}) {
    try {
      json::parse(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("at offset"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(json::parse("[\"\\u00e9\"]").array()[0].string(), "\xc3\xa9");
}

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
