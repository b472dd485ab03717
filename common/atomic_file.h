#pragma once
// Small files that readers poll for (rendezvous ports, transport addresses, flight-recorder dumps):
// written under a temporary name in the same directory, then renamed over the final name, so a
// reader sees either no file or the whole text, never half of it. Not durable across a power
// loss (no fsync): checkpoints use runtime/checkpoint/file_io's write_file_atomic for that.
#include <string>
#include <string_view>

namespace fsdp {

// Writes text to path through path.tmp-<pid> and rename(2), the file created with `mode` (less the
// umask; 0600 for what only its owner may read). Returns "" on success, else what failed and why
// ("write /dir/f.tmp-12: No space left on device"); the temporary is removed.
std::string write_file_atomically(const std::string& path, std::string_view text, unsigned mode = 0644);

}  // namespace fsdp
