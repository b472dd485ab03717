#include "train/pretokenizer.h"

#include "train/unicode_text.h"

namespace fsdp::train {
namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }  // [^\s\p{L}\p{N}]
bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }

// 's 't 're 've 'm 'll 'd; with `fold`, any case (and U+017F, which case-folds to s).
size_t contraction(std::u32string_view t, size_t i, bool fold) {
  if (t[i] != U'\'' || i + 1 >= t.size()) return 0;
  const auto lower = [&](size_t k) -> char32_t {
    if (k >= t.size()) return 0;
    char32_t c = t[k];
    if (!fold) return c;
    if (c == 0x017F) return U's';
    return c >= U'A' && c <= U'Z' ? c + 32 : c;
  };
  const char32_t a = lower(i + 1);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  const char32_t b = lower(i + 2);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

size_t run(std::u32string_view t, size_t i, bool (*cls)(char32_t)) {
  size_t j = i;
  while (j < t.size() && cls(t[j])) ++j;
  return j - i;
}

// ` ?X+` for a class X: an optional ASCII space, then one or more of X.
size_t space_then_run(std::u32string_view t, size_t i, bool (*cls)(char32_t)) {
  const size_t s = t[i] == U' ' ? 1 : 0;
  const size_t n = i + s < t.size() ? run(t, i + s, cls) : 0;
  if (n > 0) return s + n;
  return 0;  // without the space, X+ at i would need t[i] in X, and a space is in none of these classes
}

// `\s+(?!\S)` then `\s+`: a whitespace run, less its last character when a non-space follows (unless
// that leaves nothing, where `\s+` takes the whole run).
size_t whitespace_tail(std::u32string_view t, size_t i) {
  const size_t n = run(t, i, is_whitespace);
  if (n == 0) return 0;
  if (i + n == t.size() || n == 1) return n;
  return n - 1;
}

size_t match_gpt2(std::u32string_view t, size_t i) {
  if (size_t n = contraction(t, i, false)) return n;
  if (size_t n = space_then_run(t, i, is_letter)) return n;
  if (size_t n = space_then_run(t, i, is_number)) return n;
  if (size_t n = space_then_run(t, i, is_other)) return n;
  return whitespace_tail(t, i);
}

size_t match_llama3(std::u32string_view t, size_t i, size_t max_digits) {
  if (size_t n = contraction(t, i, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_letter(t[i])) return run(t, i, is_letter);
  if (!is_newline(t[i]) && !is_number(t[i]) && i + 1 < t.size() && is_letter(t[i + 1])) {
    return 1 + run(t, i + 1, is_letter);
  }
  // \p{N}{1,3}
  if (is_number(t[i])) {
    size_t n = 1;
    while (n < max_digits && i + n < t.size() && is_number(t[i + n])) ++n;
    return n;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  if (size_t n = space_then_run(t, i, is_other)) return n + run(t, i + n, is_newline);
  // \s*[\r\n]+: the whitespace run up to and including its last newline
  const size_t ws = run(t, i, is_whitespace);
  for (size_t k = ws; k > 0; --k) {
    if (is_newline(t[i + k - 1])) return k;
  }
  return whitespace_tail(t, i);
}

}  // namespace

std::string_view split_pattern_text(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2: return kGpt2Pattern;
    case SplitPattern::kLlama3: return kLlama3Pattern;
    case SplitPattern::kQwen2: return kQwen2Pattern;
  }
  return {};
}

std::string_view split_pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2: return "GPT-2";
    case SplitPattern::kLlama3: return "Llama 3";
    case SplitPattern::kQwen2: return "Qwen 2";
  }
  return {};
}

std::optional<SplitPattern> find_split_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2}) {
    if (regex == split_pattern_text(p)) return p;
  }
  return std::nullopt;
}

size_t match_split_pattern(SplitPattern p, std::u32string_view text, size_t pos) {
  switch (p) {
    case SplitPattern::kGpt2: return match_gpt2(text, pos);
    case SplitPattern::kLlama3: return match_llama3(text, pos, 3);
    case SplitPattern::kQwen2: return match_llama3(text, pos, 1);
  }
  return 0;
}

std::vector<std::u32string_view> split_isolated(SplitPattern p, std::u32string_view text) {
  std::vector<std::u32string_view> pieces;
  size_t gap = 0;  // start of text no match has covered yet
  for (size_t i = 0; i < text.size();) {
    const size_t n = match_split_pattern(p, text, i);
    if (n == 0) {
      ++i;
      continue;
    }
    if (gap < i) pieces.push_back(text.substr(gap, i - gap));
    pieces.push_back(text.substr(i, n));
    i += n;
    gap = i;
  }
  if (gap < text.size()) pieces.push_back(text.substr(gap));
  return pieces;
}

}  // namespace fsdp::train
