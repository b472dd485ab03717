#include "collectives/core/errors.h"

#include <sstream>

namespace fsdp {

std::string describe(const ErrorContext& ctx, const std::string& what) {
  std::ostringstream out;
  out << "rank " << ctx.rank;
  if (ctx.peer >= 0) out << ", peer " << ctx.peer;
  if (!ctx.op.empty()) out << ", op " << ctx.op;
  out << ", seq " << ctx.seq << ", " << ctx.bytes << " bytes: " << what;
  return out.str();
}

}  // namespace fsdp
