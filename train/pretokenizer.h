// The split regexes of byte-level BPE tokenizers, matched by hand (no regex engine): GPT-2's (the
// ByteLevel pre-tokenizer's use_regex), Llama 3's (its tokenizer.json Split and its tiktoken file) and
// Qwen 2's (Llama 3's with single digits). Semantics are those of the engines the tokenizers use
// (Oniguruma, fancy-regex): alternatives tried left to right at each position, greedy quantifiers that
// backtrack, so `\s+(?!\S)` leaves the last space of a run for the word after it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::train {

enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

// The pattern's text as tokenizer.json stores it (after JSON unescaping).
std::string_view split_pattern_text(SplitPattern p);
std::string_view split_pattern_name(SplitPattern p);
// The pattern whose text is exactly `regex`; nullopt for any other.
std::optional<SplitPattern> find_split_pattern(std::string_view regex);

// Length (code points) of the pattern's match starting at `pos` of `text` (pos < text.size()); 0 when
// no alternative matches there.
size_t match_split_pattern(SplitPattern p, std::u32string_view text, size_t pos);

// Splits `text` into the pattern's matches and the gaps between them ("Isolated": every piece kept, in
// order, concatenating back to `text`).
std::vector<std::u32string_view> split_isolated(SplitPattern p, std::u32string_view text);

}  // namespace fsdp::train
