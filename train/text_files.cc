#include "train/text_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zlib.h>

#include "common/json.h"
#include "train/unicode_text.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

struct DatasetEntry {
  const char* name;
  const char* default_path;
  const char* split;  // "" reads every data file; else the c4 layout's en/c4-<split>.* files
};
constexpr DatasetEntry kDatasets[] = {
    {"c4_test", "tests/assets/c4_test", ""},
    {"c4", "allenai/c4", "train"},
    {"c4_validation", "allenai/c4", "validation"},
};

// The name without a ".gz" (gzipped files are read through zlib, as the Hub keeps c4).
fs::path unzipped_name(const fs::path& p) { return p.extension() == ".gz" ? p.stem() : p; }
bool is_json_name(const fs::path& p) {
  const fs::path n = unzipped_name(p);
  return n.extension() == ".json" || n.extension() == ".jsonl";
}
bool is_data_name(const fs::path& p) { return is_json_name(p) || unzipped_name(p).extension() == ".txt"; }

// The data files under `root` (itself when a file), hidden ones skipped, in path order; with `prefix`,
// only files whose name starts with it.
std::vector<std::string> data_files_under(const fs::path& root, const std::string& prefix = "") {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {root.string()};
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); ++it) {
    const std::string leaf = it->path().filename().string();
    if (!leaf.empty() && leaf[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && is_data_name(it->path()) && leaf.starts_with(prefix)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const fs::path& path) {
  if (path.extension() == ".gz") {
    gzFile in = gzopen(path.c_str(), "rb");
    if (in == nullptr) throw DataFileError(path.string() + ": cannot read");
    std::string text;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(in, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    int err = Z_OK;
    const std::string what = n < 0 ? gzerror(in, &err) : "";
    gzclose(in);
    if (n < 0) throw DataFileError(path.string() + ": not a readable gzip file (" + what + ")");
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataFileError(path.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string not_utf8(std::string_view line, size_t bad) {
  return "not UTF-8 (byte " + std::to_string(bad + 1) + " of the line is 0x" +
         [](unsigned char b) {
           static const char* hex = "0123456789abcdef";
           return std::string{hex[b >> 4], hex[b & 15]};
         }(static_cast<unsigned char>(line[bad])) + ")";
}

std::string text_field(const json::Value& v, const std::string& where) {
  if (v.kind != json::Value::Kind::kObject) throw DataFileError(where + ": not a JSON object");
  const json::Value* text = v.find("text");
  if (text == nullptr) throw DataFileError(where + ": no \"text\" field");
  if (text->kind != json::Value::Kind::kString) throw DataFileError(where + ": \"text\" is not a string");
  return text->str;
}

}  // namespace

std::vector<std::string> parse_text_documents(std::string_view text, const std::string& name, bool json_lines) {
  std::vector<std::string> docs;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) throw DataFileError(name + ": empty (no documents)");
  if (json_lines && text[first] == '[') {  // one JSON array of objects
    if (const size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos) {
      const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n'));
      throw DataFileError(name + ":" + std::to_string(line) + ": not UTF-8");
    }
    json::Value array;
    try {
      array = json::parse(text);
    } catch (const std::exception& e) {
      throw DataFileError(name + ": not JSON: " + e.what());
    }
    for (size_t i = 0; i < array.items.size(); ++i) {
      docs.push_back(text_field(array.items[i], name + ": element " + std::to_string(i)));
    }
    if (docs.empty()) throw DataFileError(name + ": empty (no documents)");
    return docs;
  }
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // universal newlines
    const std::string where = name + ":" + std::to_string(line_no);
    if (const size_t bad = unicode::find_invalid_utf8(line); bad != std::string_view::npos) {
      throw DataFileError(where + ": " + not_utf8(line, bad));
    }
    if (!json_lines) {
      docs.emplace_back(line);  // an empty line is an empty document, as the "text" builder makes it
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines separate nothing
    json::Value v;
    try {
      v = json::parse(line);
    } catch (const std::exception& e) {
      throw DataFileError(where + ": not JSON: " + e.what());
    }
    docs.push_back(text_field(v, where));
  }
  if (docs.empty()) throw DataFileError(name + ": empty (no documents)");
  return docs;
}

std::vector<std::string> read_text_documents(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw DataFileError(path + ": does not exist");
  const std::vector<std::string> files = data_files_under(path);
  if (files.empty()) throw DataFileError(path + ": no .json, .jsonl or .txt file (or .gz of one) in this folder");
  return read_text_documents(files);
}

std::vector<std::string> read_text_documents(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  for (const auto& f : files) {
    auto more = parse_text_documents(read_file(f), f, is_json_name(f));
    docs.insert(docs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return docs;
}

bool is_text_dataset(std::string_view dataset) {
  return std::any_of(std::begin(kDatasets), std::end(kDatasets), [&](const auto& d) { return dataset == d.name; });
}

std::vector<std::string> text_dataset_files(std::string_view dataset, const std::string& dataset_path) {
  const auto* entry = std::find_if(std::begin(kDatasets), std::end(kDatasets), [&](const auto& d) { return dataset == d.name; });
  if (entry == std::end(kDatasets)) throw DataFileError("'" + std::string(dataset) + "' is not a text data set");
  const std::string path = dataset_path.empty() ? entry->default_path : dataset_path;
  const std::string looked_at = "training.dataset = '" + std::string(dataset) + "' reads '" + path + "'" +
                                (fs::path(path).is_relative() ? " (from " + fs::current_path().string() + ")" : "");
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataFileError(looked_at + ", which does not exist; nothing is downloaded: set training.dataset_path to a "
                        "local copy");
  }
  // The c4 layout: en/c4-train.NNNNN-of-01024.json.gz.
  const bool c4_layout = *entry->split != '\0' && fs::is_directory(fs::path(path) / "en", ec);
  const std::string prefix = c4_layout ? "c4-" + std::string(entry->split) + "." : "";
  const std::vector<std::string> files = data_files_under(c4_layout ? fs::path(path) / "en" : fs::path(path), prefix);
  if (files.empty()) {
    throw DataFileError(looked_at + ", which holds no .json, .jsonl or .txt file (or .gz of one)" +
                        (c4_layout ? " named " + prefix + "* under en/" : std::string()));
  }
  return files;
}

}  // namespace fsdp::train
