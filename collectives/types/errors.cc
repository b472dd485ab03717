#include "collectives/types/errors.h"

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

Failure to_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    return {Failure::Kind::kTimeout, e.context(), e.detail()};
  } catch (const PeerLostError& e) {
    return {Failure::Kind::kPeerLost, e.context(), e.detail()};
  } catch (const AbortedError& e) {
    return {Failure::Kind::kAborted, e.context(), e.detail()};
  } catch (const MismatchError& e) {
    return {Failure::Kind::kMismatch, e.context(), e.detail()};
  } catch (const CommError& e) {
    return {Failure::Kind::kComm, e.context(), e.detail()};
  } catch (const std::exception& e) {
    return {Failure::Kind::kOther, {}, e.what()};
  } catch (...) {
    return {Failure::Kind::kOther, {}, "unknown exception"};
  }
}

void throw_failure(const Failure& f) {
  switch (f.kind) {
    case Failure::Kind::kTimeout:
      throw TimeoutError(f.ctx, f.detail);
    case Failure::Kind::kPeerLost:
      throw PeerLostError(f.ctx, f.detail);
    case Failure::Kind::kAborted:
      throw AbortedError(f.ctx, f.detail);
    case Failure::Kind::kMismatch:
      throw MismatchError(f.ctx, f.detail);
    case Failure::Kind::kComm:
      throw CommError(f.ctx, f.detail);
    case Failure::Kind::kOther:
      break;
  }
  throw std::runtime_error(f.detail);
}

}  // namespace fsdp
