// The JSON writer and reader (common/json.h): what fsdp-bench, its report tool and the traces write and read.
#include "common/json.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace fsdp {
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

// safetensors offsets and shapes are read as exact integers, not through a double.
TEST(CheckpointJson, IntegersStayExact) {
  const auto v = json::parse(R"( {"a": [1, -2, 9007199254740993, 3.5, 1e3]} )");
  const auto& a = v.at("a").array();
  EXPECT_EQ(a.at(1).integer(), -2);
  EXPECT_EQ(a.at(2).integer(), 9007199254740993);  // 2^53 + 1: a double would round it
  EXPECT_THROW(a.at(3).integer(), std::runtime_error);
  EXPECT_THROW(a.at(4).integer(), std::runtime_error);
  EXPECT_THROW(json::parse("[9223372036854775808]").items.at(0).integer(), std::runtime_error);
}

}  // namespace
}  // namespace fsdp
