// Environment knobs: every FSDP_* variable (and the few NCCL_* ones the C API honours) declared once,
// with its default and a doc line, as NCCL declares NCCL_PARAM. Code reads a knob through its
// declaration, never through getenv:
//
//   const double seconds = knobs::kTimeoutSec.get();   // parsed, range-checked, cached
//
// A knob parses its variable when read and keeps the parse while the variable's text is unchanged
// (tests change variables at run time). A malformed or out-of-range value throws InvalidArgument
// naming the variable and what it accepts. all_knobs() lists every knob for `--print-config`, the
// start-up log and docs/config.md (a test checks the docs list them all).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::knobs {

// One variable's declaration. T is bool, int64_t, double or std::string.
template <class T>
struct Knob {
  std::string_view env;  // "FSDP_TIMEOUT_SEC"
  T fallback;            // the value when the variable is unset or empty
  std::string_view doc;  // one line: what it does, its unit
  // Numbers: the accepted range, lo < value (lo_open) or lo <= value, value <= hi.
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  // Strings: the accepted values, "a|b|c"; empty accepts any text.
  std::string_view choices = {};

  // The variable's value (the fallback when unset or empty), parsed and cached while its text is
  // unchanged. Throws InvalidArgument naming the variable when the text is malformed or out of range.
  T get() const;
  bool is_set() const;  // the variable is set and not empty
  // `text` as this knob's value, with the same checks and errors: for callers that read the variable
  // through their own environment (launch/bootstrap's injectable reader).
  T parse(const std::string& text) const;
};

// --- collectives (CommOptions::from_env) ---
extern const Knob<double> kTimeoutSec;
extern const Knob<int64_t> kSmallMsgBytes;
extern const Knob<int64_t> kFlagPathBytes;
extern const Knob<int64_t> kStreamCopyBytes;
extern const Knob<int64_t> kChunkBytes;
extern const Knob<std::string> kAlgo;
extern const Knob<bool> kCheckCollectives;
extern const Knob<int64_t> kFlightRecorderEntries;
extern const Knob<std::string> kFlightRecorderDir;
// --- transports ---
extern const Knob<std::string> kShmCopy;
extern const Knob<int64_t> kShmCmaMinBytes;
extern const Knob<int64_t> kTcpConnections;
extern const Knob<int64_t> kTcpSocketBufferBytes;
// --- launch ---
extern const Knob<std::string> kTransport;
extern const Knob<double> kRendezvousTimeoutSec;
extern const Knob<bool> kStoreExternal;
extern const Knob<bool> kFtJoin;
extern const Knob<int64_t> kFtAwaitJoinStep;
extern const Knob<double> kHeartbeatTimeoutSec;
extern const Knob<int64_t> kStoreMaxConnections;
extern const Knob<double> kStoreIdleTimeoutSec;
extern const Knob<double> kStoreIoTimeoutSec;
extern const Knob<std::string> kRunId;
extern const Knob<std::string> kJobSecret;
extern const Knob<std::string> kJobSecretFile;
extern const Knob<std::string> kRendezvousDir;
extern const Knob<std::string> kHostId;
extern const Knob<std::string> kMasterAddr;
extern const Knob<int64_t> kMasterPort;
extern const Knob<double> kRunGraceSec;
extern const Knob<double> kRunTermDelaySec;
extern const Knob<int64_t> kRestartCount;
extern const Knob<int64_t> kMaxRestarts;
extern const Knob<std::string> kRestartCause;
// --- memory (common/block_cache.h) ---
extern const Knob<bool> kCachingAllocator;
extern const Knob<bool> kUnitWindows;
// --- threads (launch/thread_budget.h) ---
extern const Knob<std::string> kOpenblasNumThreads;
extern const Knob<std::string> kOmpNumThreads;
extern const Knob<std::string> kOpenblasCoretype;
// --- NCCL-compatible API ---
extern const Knob<std::string> kNcclHost;
extern const Knob<std::string> kNcclCommId;
extern const Knob<std::string> kNcclDebug;
extern const Knob<std::string> kNcclDebugFallback;
// --- fault injection (tests) ---
extern const Knob<int64_t> kFaultKillAfterCheckpointFiles;
extern const Knob<std::string> kFaultKillAfterStep;

// A knob as text, for listings.
struct KnobInfo {
  std::string env;
  std::string type;           // "seconds", "bytes", "int", "bool", "string", or the choices "a|b"
  std::string default_value;  // as text; "" for an empty default
  std::string value;          // what the process resolves now (the default when unset)
  bool set = false;           // the variable is set
  std::string doc;
};
// Every declared knob, in declaration order. A malformed variable shows as "invalid: <why>".
std::vector<KnobInfo> all_knobs();
// "FSDP_TIMEOUT_SEC=300 (default)\n..." one line per knob, each after `line_prefix`: for --print-config.
std::string describe_knobs(std::string_view line_prefix = "");

}  // namespace fsdp::knobs
