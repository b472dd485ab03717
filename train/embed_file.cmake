# cmake -DINPUT=file -DOUTPUT=file.cc -DFUNCTION=ns::name -P embed_file.cmake
# Writes a .cc defining `std::string_view FUNCTION()` over the input's bytes.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
# 16 bytes per line keeps the generated file readable in an editor.
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){16})" "\\1\n  " bytes "${bytes}")
string(REGEX MATCH "^(.*)::([^:]+)$" _ "${FUNCTION}")
set(ns "${CMAKE_MATCH_1}")
set(fn "${CMAKE_MATCH_2}")
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by embed_file.cmake; do not edit.
#include <string_view>

namespace ${ns} {
namespace {
const char kData[] = {
  ${bytes} '\\0'};
}  // namespace

std::string_view ${fn}() { return std::string_view(kData, ${size}); }

}  // namespace ${ns}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
