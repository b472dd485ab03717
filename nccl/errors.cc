#include "nccl/errors.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <system_error>

#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "nccl/comm.h"

namespace fsdp::nccl {
namespace {

std::mutex g_last_mu;
std::string g_last_error;  // the process's most recent error, for ncclGetLastError(NULL)

int parse_level(const char* v) {
  if (!v) return -1;
  const std::string_view s(v);
  if (s == "INFO" || s == "info" || s == "TRACE" || s == "trace") return 2;
  if (s == "WARN" || s == "warn") return 1;
  if (s == "VERSION" || s == "version" || s.empty() || s == "0" || s == "NONE" || s == "none") return 0;
  return 1;
}

}  // namespace

int debug_level() {
  static const int level = [] {
    const int own = knobs::kNcclDebug.is_set() ? parse_level(knobs::kNcclDebug.get().c_str()) : -1;
    if (own >= 0) return own;
    const int theirs = knobs::kNcclDebugFallback.is_set() ? parse_level(knobs::kNcclDebugFallback.get().c_str()) : -1;
    return theirs >= 0 ? theirs : 0;
  }();
  return level;
}

void debug_info(const std::string& text) {
  if (debug_level() >= 2) std::fprintf(stderr, "fsdp-nccl INFO %s\n", text.c_str());
}

Classified classify(const std::exception_ptr& error) {
  Classified c;
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    c = {e.code(), false, e.what()};
  } catch (const InvalidArgument& e) {
    c = {ncclInvalidArgument, false, e.what()};
  } catch (const TimeoutError& e) {
    c = {ncclRemoteError, true, e.what()};
  } catch (const PeerLostError& e) {
    c = {ncclRemoteError, true, e.what()};
  } catch (const AbortedError& e) {
    c = {ncclInvalidUsage, true, e.what()};
  } catch (const MismatchError& e) {
    c = {ncclInvalidUsage, true, e.what()};
  } catch (const CommError& e) {
    c = {ncclSystemError, true, e.what()};
  } catch (const std::bad_alloc&) {
    c = {ncclSystemError, false, "out of memory"};
  } catch (const std::system_error& e) {
    c = {ncclSystemError, false, e.what()};
  } catch (const std::exception& e) {
    c = {ncclInternalError, false, e.what()};
  } catch (...) {
    c = {ncclInternalError, false, "unknown exception"};
  }
  return c;
}

void record_error(ncclComm* comm, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(g_last_mu);
    g_last_error = text;
  }
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->last_error = text;
  }
  if (debug_level() >= 1) std::fprintf(stderr, "fsdp-nccl WARN %s\n", text.c_str());
}

std::string last_error(ncclComm* comm) {
  HandlePin pin(comm);  // a handle no longer held reads as NULL: the process's last error
  if (comm && pin.valid()) {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (!comm->last_error.empty()) return comm->last_error;
  }
  std::lock_guard<std::mutex> lock(g_last_mu);
  return g_last_error;
}

}  // namespace fsdp::nccl
