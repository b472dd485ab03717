#include "train/config_paths.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "train/config_fields.h"
#include "train/data_setup.h"
#include "train/text_files.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

// "" when this process may create or replace `path` (a file, or a folder when `folder`), else why not:
// the nearest existing ancestor must be a writable folder.
std::string unwritable(const fs::path& path, bool folder) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (folder && !fs::is_directory(path, ec)) return "exists and is not a directory";
    if (!folder && fs::is_directory(path, ec)) return "is a directory";
    return ::access(path.c_str(), W_OK) == 0 ? "" : "is not writable";
  }
  fs::path up = path.has_parent_path() ? path.parent_path() : fs::path(".");
  while (!fs::exists(up, ec) && up.has_parent_path() && up.parent_path() != up) up = up.parent_path();
  if (!fs::exists(up, ec)) up = ".";
  if (!fs::is_directory(up, ec)) return "cannot be created: '" + up.string() + "' is not a directory";
  if (::access(up.c_str(), W_OK | X_OK) != 0) return "cannot be created: '" + up.string() + "' is not writable";
  return "";
}

// "key = 'value'" and, when the value is relative to job.dump_folder, what it resolves to.
std::string named(const std::string& key, const std::string& value, const std::string& resolved) {
  return key + " = '" + value + "'" + (resolved != value ? " (" + resolved + ")" : "");
}

void data_problems(const TrainConfig& c, std::vector<std::string>& problems) {
  const auto& t = c.training;
  if (is_text_dataset(t.dataset)) {
    try {
      for (const auto& file : text_dataset_files(t.dataset, t.dataset_path)) {
        if (::access(file.c_str(), R_OK) != 0) throw DataFileError("training.dataset: '" + file + "' cannot be read");
      }
    } catch (const DataFileError& e) {
      problems.push_back(c.where_set(t.dataset_path.empty() ? "training.dataset" : "training.dataset_path") + e.what());
    }
  }
  try {
    job_tokenizer(c);
  } catch (const ConfigError& e) {
    const bool own_key = !c.model.tokenizer_path.empty() || !c.model.hf_assets_path.empty();
    problems.push_back(c.where_set(!c.model.tokenizer_path.empty() ? "model.tokenizer_path"
                                   : own_key                       ? "model.hf_assets_path"
                                                                   : "training.dataset") +
                       e.what());
  }
  // The assets folder when the tokenizer is read from elsewhere (model.tokenizer_path).
  std::error_code ec;
  if (!c.model.hf_assets_path.empty() && !c.model.tokenizer_path.empty() && !fs::exists(c.model.hf_assets_path, ec)) {
    problems.push_back(c.where_set("model.hf_assets_path") + "model.hf_assets_path = '" + c.model.hf_assets_path +
                       "' does not exist");
  }
}

void checkpoint_problems(const TrainConfig& c, std::vector<std::string>& problems) {
  const auto& ck = c.checkpoint;
  if (!ck.enable_checkpoint) return;
  if (const std::string why = unwritable(c.checkpoint_dir(), true); !why.empty()) {
    problems.push_back(c.where_set("checkpoint.folder") + "checkpoint.folder = '" + ck.folder + "' resolves to '" +
                       c.checkpoint_dir() + "', which " + why);
  }
  if (ck.last_save_in_hf && !ck.last_save_model_only) {
    problems.push_back(c.where_set("checkpoint.last_save_in_hf") +
                       "checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true: "
                       "safetensors hold weights only");
  }
  const std::string& initial = ck.initial_load_path;
  const std::string where = c.where_set("checkpoint.initial_load_path");
  std::error_code ec;
  if (initial.empty()) {
    if (ck.initial_load_in_hf) {
      problems.push_back(c.where_set("checkpoint.initial_load_in_hf") +
                         "checkpoint.initial_load_in_hf = true needs checkpoint.initial_load_path (a "
                         ".safetensors file, or a folder holding one)");
    }
  } else if (!fs::exists(initial, ec)) {
    problems.push_back(where + "checkpoint.initial_load_path = '" + initial + "' does not exist");
  } else if (::access(initial.c_str(), R_OK) != 0) {
    problems.push_back(where + "checkpoint.initial_load_path = '" + initial + "' cannot be read");
  } else {
    try {
      initial_safetensors_files(ck);
    } catch (const ConfigError& e) {
      problems.push_back(where + e.what());
    }
  }
}

// What the run writes (metrics.file, metrics.trace_file: found unwritable now, not after the last step)
// and the plan it reads.
void output_problems(const TrainConfig& c, std::vector<std::string>& problems) {
  for (const auto& [key, value, resolved] : {std::tuple{"metrics.file", c.metrics.file, c.metrics_path()},
                                             std::tuple{"metrics.trace_file", c.metrics.trace_file, c.trace_path()}}) {
    if (value.empty()) continue;
    if (const std::string why = unwritable(resolved, false); !why.empty()) {
      problems.push_back(c.where_set(key) + named(key, value, resolved) + " " + why);
    }
  }
  const std::string& plan = c.parallelism.plan_file;
  std::error_code ec;
  if (!plan.empty() && (!fs::is_regular_file(plan, ec) || ::access(plan.c_str(), R_OK) != 0)) {
    problems.push_back(c.where_set("parallelism.plan_file") + "parallelism.plan_file = '" + plan + "' " +
                       (fs::exists(plan, ec) ? "is not a readable file" : "does not exist"));
  }
}

}  // namespace

std::string TrainConfig::where_set(std::string_view key) const {
  const auto it = key_lines.find(std::string(key));
  return it == key_lines.end() || it->second.empty() ? "" : it->second + ": ";
}

std::vector<std::string> path_problems(const TrainConfig& config) {
  std::vector<std::string> problems;
  data_problems(config, problems);
  checkpoint_problems(config, problems);
  output_problems(config, problems);
  return problems;
}

void check_paths(const TrainConfig& config) {
  if (const auto problems = path_problems(config); !problems.empty()) config_table::throw_config_errors(problems);
}

std::vector<std::string> initial_safetensors_files(const CheckpointConfig& ck) {
  const std::string& path = ck.initial_load_path;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else if (ck.initial_load_in_hf) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".safetensors") files.push_back(it->path().string());
    }
    if (files.empty()) {
      throw ConfigError("checkpoint.initial_load_in_hf: checkpoint.initial_load_path = '" + path +
                        "' holds no .safetensors file");
    }
    std::sort(files.begin(), files.end());
  } else {
    return {};
  }
  if (!ck.initial_load_model_only) {
    throw ConfigError("checkpoint.initial_load_path = '" + path +
                      "' is safetensors, which holds weights only: it cannot resume a training state "
                      "(checkpoint.initial_load_model_only = false)");
  }
  return files;
}

}  // namespace fsdp::train
