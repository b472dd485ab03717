// Sets (or, with nullptr, unsets) an environment variable for one scope and restores it after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace fsdp::testing {

class ScopedEnv {
 public:
  ScopedEnv(std::string_view name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      ::setenv(name_.c_str(), value, 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace fsdp::testing
