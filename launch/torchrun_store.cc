#include "launch/torchrun_store.h"

#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/knobs.h"
#include "launch/torch_store_client.h"

namespace fsdp::launch {
namespace {

std::optional<std::string> real_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// torch reads the variable with its own truthiness: "True" (what the agent writes), "1", "yes", "on".
bool truthy(const std::optional<std::string>& v) {
  if (!v) return false;
  std::string s;
  for (char c : *v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "true" || s == "1" || s == "yes" || s == "on";
}

}  // namespace

std::shared_ptr<KeyValueStore> join_torchrun_store(const ProcessEnv& env, bool external_store,
                                                   std::chrono::milliseconds timeout, const EnvReader& reader) {
  const EnvReader read = reader ? reader : EnvReader(real_env);
  if (external_store || !truthy(read("TORCHELASTIC_USE_AGENT_STORE"))) return nullptr;
  const auto own_port = read(std::string(knobs::kMasterPort.env));
  if (own_port && !own_port->empty()) return nullptr;                   // the user named a store of ours
  if (env.master_addr.empty() || env.master_port == 0) return nullptr;  // find_or_serve_store explains
  const std::string ns = "fsdp.torchrun/" + read("TORCHELASTIC_RUN_ID").value_or("none") + "/" +
                         read("TORCHELASTIC_RESTART_COUNT").value_or("0") + "/";
  return std::make_shared<TorchStoreClient>(env.master_addr, env.master_port, timeout, ns);
}

}  // namespace fsdp::launch
