#include "collectives/core/options.h"

#include "common/knobs.h"

namespace fsdp {

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(static_cast<long long>(knobs::kTimeoutSec.get() * 1000.0));
  o.small_message_bytes = static_cast<size_t>(knobs::kSmallMsgBytes.get());  // 0 turns the latency algorithms off
  o.flag_path_bytes = static_cast<size_t>(knobs::kFlagPathBytes.get());
  o.chunk_bytes = static_cast<size_t>(knobs::kChunkBytes.get());
  o.algorithms = knobs::kAlgo.get();
  o.check_collectives = knobs::kCheckCollectives.get();
  return o;
}

}  // namespace fsdp
