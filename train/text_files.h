// Local text data as people keep it, read into documents the way Hugging Face's `load_dataset` reads a
// folder for TorchTitan: JSON lines with a "text" field (c4 style; a .json file may instead hold one
// array of such objects), plain text files (one document per line, as the "text" builder splits them),
// or a folder of them (every .json / .jsonl / .txt file below it, hidden ones skipped, in path order);
// any of them may be gzipped (name.gz), as the Hub keeps c4.
// Nothing is downloaded: TorchTitan's data set names resolve to local folders.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::train {

// A data file that cannot be used: "FILE:LINE: what" (or "FILE: what" for the whole file).
class DataFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every document of `path` (a file or a folder), in order. Refuses, naming the file and line, text that
// is not UTF-8, a JSON line that is not an object with a string "text", and a file with no documents.
std::vector<std::string> read_text_documents(const std::string& path);
std::vector<std::string> read_text_documents(const std::vector<std::string>& files);  // in this order

// Documents of one file's text; `name` is the file in errors, `json` picks the JSON reader.
std::vector<std::string> parse_text_documents(std::string_view text, const std::string& name, bool json);

// TorchTitan's data sets (its DATASETS table): c4_test reads tests/assets/c4_test, c4 and c4_validation
// the Hub's allenai/c4 (here: a local copy, its en/ folder's c4-train.*.json.gz / c4-validation.* files);
// training.dataset_path replaces the path. Relative paths are from the working directory.
bool is_text_dataset(std::string_view dataset);
// The files the data set reads, in order. Throws DataFileError naming the path looked at when it is
// missing or holds no data file.
std::vector<std::string> text_dataset_files(std::string_view dataset, const std::string& dataset_path);

}  // namespace fsdp::train
