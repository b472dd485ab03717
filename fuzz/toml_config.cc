// libFuzzer target: TOML text through toml_util::parse, the entry point the fsdp-train config reader
// (train/config_reader.cc), model specs and chip profiles all parse with, then the typed getters over
// every top-level key. A malformed file must end in an fsdp error naming the file, never a crash.
#include <cstdint>
#include <string_view>

#include "common/errors.h"
#include "common/toml_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tu = fsdp::toml_util;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const toml::table t = tu::parse(text, "job.toml");
    for (const auto& [key, node] : t) {
      const std::string_view k = key.str();
      try { (void)tu::get_string("job.toml", t, k); } catch (const fsdp::InputError&) {}
      try { (void)tu::get_int("job.toml", t, k); } catch (const fsdp::InputError&) {}
      try { (void)tu::get_number("job.toml", t, k); } catch (const fsdp::InputError&) {}
      try { (void)tu::get_bool("job.toml", t, k); } catch (const fsdp::InputError&) {}
    }
  } catch (const fsdp::InputError&) {
  }
  return 0;
}
