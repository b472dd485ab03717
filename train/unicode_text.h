// UTF-8 and the few Unicode classes the tokenizers need: \p{L}, \p{N} and \s as the regex engines of
// Hugging Face tokenizers and tiktoken see them (tables generated from Unicode 14 by
// train/tools/gen_unicode_classes.py).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::train::unicode {

// Code points of valid UTF-8; nullopt when invalid, with the byte offset of the first bad sequence in
// *bad_offset (overlong forms, surrogates and values past U+10FFFF are invalid, as Python's decoder says).
std::optional<std::u32string> decode_utf8(std::string_view text, size_t* bad_offset = nullptr);
// Offset of the first invalid byte sequence, or npos when `text` is valid UTF-8.
size_t find_invalid_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view text);

bool is_letter(char32_t cp);      // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);      // \p{N}: Nd Nl No
bool is_whitespace(char32_t cp);  // \s: Unicode White_Space

}  // namespace fsdp::train::unicode
