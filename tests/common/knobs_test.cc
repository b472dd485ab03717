// Environment knobs: parsed and checked in one place, re-read when the variable changes, every one
// listed in docs/config.md with its default.
#include "common/knobs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "common/errors.h"
#include "tests/common/scoped_env.h"

namespace fsdp::knobs {
namespace {

using testing::ScopedEnv;

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Knobs, UnsetOrEmptyGivesTheDefault) {
  ::unsetenv("FSDP_TIMEOUT_SEC");
  EXPECT_EQ(kTimeoutSec.get(), 300.0);
  ScopedEnv empty("FSDP_TIMEOUT_SEC", "");
  EXPECT_EQ(kTimeoutSec.get(), 300.0);
  EXPECT_FALSE(kTimeoutSec.is_set());
}

TEST(Knobs, AValueIsParsedAndAChangedValueIsReadAgain) {
  {
    ScopedEnv v("FSDP_CHUNK_BYTES", "4096");
    EXPECT_EQ(kChunkBytes.get(), 4096);
    EXPECT_EQ(kChunkBytes.get(), 4096);  // cached
  }
  ScopedEnv v("FSDP_CHUNK_BYTES", "8192");
  EXPECT_EQ(kChunkBytes.get(), 8192);
}

TEST(Knobs, MalformedAndOutOfRangeValuesNameTheVariable) {
  {
    ScopedEnv v("FSDP_TIMEOUT_SEC", "soon");
    const std::string e = error_of([] { kTimeoutSec.get(); });
    EXPECT_NE(e.find("FSDP_TIMEOUT_SEC='soon'"), std::string::npos) << e;
    EXPECT_NE(e.find("> 0"), std::string::npos) << e;
  }
  {
    ScopedEnv v("FSDP_TIMEOUT_SEC", "0");
    EXPECT_THROW(kTimeoutSec.get(), InvalidArgument);  // lo is open
  }
  {
    ScopedEnv v("FSDP_SMALL_MSG_BYTES", "0");
    EXPECT_EQ(kSmallMsgBytes.get(), 0);  // lo is closed
  }
  {
    ScopedEnv v("FSDP_CHUNK_BYTES", "12kb");
    EXPECT_NE(error_of([] { kChunkBytes.get(); }).find("FSDP_CHUNK_BYTES='12kb' is not an integer"),
              std::string::npos);
  }
  {
    ScopedEnv v("FSDP_MASTER_PORT", "70000");
    EXPECT_NE(error_of([] { kMasterPort.get(); }).find("<= 65535"), std::string::npos);
  }
}

TEST(Knobs, ChoicesAndBooleans) {
  {
    ScopedEnv v("FSDP_SHM_COPY", "staging");
    EXPECT_EQ(kShmCopy.get(), "staging");
  }
  {
    ScopedEnv v("FSDP_SHM_COPY", "teleport");
    EXPECT_NE(error_of([] { kShmCopy.get(); }).find("one of auto,staging,cma"), std::string::npos);
  }
  for (const char* yes : {"1", "true", "yes", "on"}) {
    ScopedEnv v("FSDP_STORE_EXTERNAL", yes);
    EXPECT_TRUE(kStoreExternal.get()) << yes;
  }
  for (const char* no : {"0", "false", "no", "off"}) {
    ScopedEnv v("FSDP_STORE_EXTERNAL", no);
    EXPECT_FALSE(kStoreExternal.get()) << no;
  }
  ScopedEnv v("FSDP_STORE_EXTERNAL", "maybe");
  EXPECT_THROW(kStoreExternal.get(), InvalidArgument);
}

TEST(Knobs, ParseChecksTextFromAnotherSource) {
  EXPECT_EQ(kMasterPort.parse("29500"), 29500);
  EXPECT_THROW(kMasterPort.parse("0"), InvalidArgument);
}

TEST(Knobs, ListingShowsDefaultsValuesAndInvalidOnes) {
  ScopedEnv v("FSDP_ALGO", "all_reduce=ring");
  ScopedEnv bad("FSDP_CHUNK_BYTES", "-1");
  bool saw_algo = false, saw_chunk = false;
  for (const auto& k : all_knobs()) {
    if (k.env == "FSDP_ALGO") {
      saw_algo = true;
      EXPECT_TRUE(k.set);
      EXPECT_EQ(k.value, "all_reduce=ring");
    }
    if (k.env == "FSDP_CHUNK_BYTES") {
      saw_chunk = true;
      EXPECT_EQ(k.default_value, "524288");
      EXPECT_EQ(k.type, "bytes");
      EXPECT_EQ(k.value.rfind("invalid: ", 0), 0u) << k.value;
    }
  }
  EXPECT_TRUE(saw_algo && saw_chunk);
  EXPECT_NE(describe_knobs("# ").find("# FSDP_ALGO=all_reduce=ring\n"), std::string::npos);
}

// Every knob has a row in docs/config.md giving its default, so the reference cannot fall behind.
TEST(Knobs, EveryKnobIsDocumentedWithItsDefault) {
  std::ifstream in(std::string(FSDP_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  for (const auto& k : all_knobs()) {
    const std::string shown = k.default_value.empty() ? "empty" : k.default_value;
    const std::string row = "| `" + k.env + "` | " + shown + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/config.md lacks the row starting " << row;
  }
}

}  // namespace
}  // namespace fsdp::knobs
