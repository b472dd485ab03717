#include "common/knobs.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <variant>

#include "common/errors.h"

namespace fsdp::knobs {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- the declarations: one line each; docs/config.md lists them (tests/common checks it) ----

const Knob<double> kTimeoutSec{
    "FSDP_TIMEOUT_SEC", 300.0, "seconds one collective may wait on its peers before TimeoutError", 0, kInf, true};
const Knob<int64_t> kSmallMsgBytes{"FSDP_SMALL_MSG_BYTES", 64 * 1024,
                                   "below this many bytes the latency algorithms run (0: never)", 0};
// The flag path's slot holds 4096 bytes (collectives/flag_path.h kFlagPayloadBytes).
const Knob<int64_t> kFlagPathBytes{"FSDP_FLAG_PATH_BYTES", 4096,
                                   "collectives on one host posting at most this many bytes per rank run through "
                                   "flags in shared memory, bypassing the progress engine (0: never)",
                                   0, 4096};
// Measured on this project's CI kind: docs/benchmarks.md "Shared-memory windows".
const Knob<int64_t> kStreamCopyBytes{"FSDP_STREAM_COPY_BYTES", 4 << 20,
                                     "writes into a collective's output of at least this many bytes (windowed "
                                     "all-gather blocks, a two-rank windowed reduce-scatter's sum) use "
                                     "non-temporal stores, bypassing the cache (0: never)",
                                     0};
const Knob<int64_t> kChunkBytes{
    "FSDP_CHUNK_BYTES", 512 * 1024, "pipelining unit of the ring algorithms, bytes", 0, kInf, true};
const Knob<std::string> kAlgo{"FSDP_ALGO", "", "force algorithms by collective, e.g. all_reduce=ring,all_gather=bruck"};
const Knob<bool> kCheckCollectives{
    "FSDP_CHECK_COLLECTIVES", false,
    "exchange each collective's fingerprint (op, count, dtype, root, reduce op) first and "
    "fail every rank at once on a mismatch, naming both calls (one extra small round per "
    "collective)"};
const Knob<int64_t> kFlightRecorderEntries{"FSDP_FLIGHT_RECORDER_ENTRIES", 2048,
                                           "collectives each process keeps in its flight recorder ring (0: off)", 0};
const Knob<std::string> kFlightRecorderDir{"FSDP_FLIGHT_RECORDER_DIR", "",
                                           "where each rank writes its flight recorder at its first failed "
                                           "operation (fsdp-train: the job's dump folder unless set; empty: nowhere)"};

const Knob<std::string> kShmCopy{"FSDP_SHM_COPY",
                                 "auto",
                                 "how shm moves large payloads: auto (process_vm_readv from FSDP_SHM_CMA_MIN_BYTES "
                                 "where the kernel allows, else staging), staging, cma; rank 0's value holds",
                                 -kInf,
                                 kInf,
                                 false,
                                 "auto|staging|cma"};
// Below 1 MiB the staging pipeline beats one process_vm_readv (page pinning costs more than the second,
// cache-resident copy); above it one pinned copy wins. Measured: docs/transports.md.
const Knob<int64_t> kShmCmaMinBytes{"FSDP_SHM_CMA_MIN_BYTES",
                                    1 << 20,
                                    "with FSDP_SHM_COPY=auto, payloads of at least this many bytes use one "
                                    "process_vm_readv",
                                    0,
                                    kInf,
                                    true};

// At most kTcpMaxConnectionsPerPeer (collectives/transports/tcp.h).
const Knob<int64_t> kTcpConnections{
    "FSDP_TCP_CONNECTIONS", 1,
    "TCP connections per pair of ranks, large payloads striped across them; every rank the same", 1, 8};
const Knob<int64_t> kTcpSocketBufferBytes{
    "FSDP_TCP_SOCKET_BUFFER_BYTES", 4 << 20,
    "SO_SNDBUF and SO_RCVBUF of every TCP connection (0: the kernel's autotuning)", 0, 1 << 30};

const Knob<std::string> kTransport{"FSDP_TRANSPORT", "auto",
                                   "what connect_world builds: auto (shm on one host, shm+tcp across), shm, tcp, ucx, "
                                   "mpi, shm+tcp, shm+ucx (checked against what this build has)"};
const Knob<double> kRendezvousTimeoutSec{"FSDP_RENDEZVOUS_TIMEOUT_SEC",
                                         120.0,
                                         "seconds start-up waits for every rank to join the rendezvous",
                                         0,
                                         kInf,
                                         true};
const Knob<bool> kStoreExternal{"FSDP_STORE_EXTERNAL", false,
                                "the store at MASTER_ADDR:MASTER_PORT is served by someone else (fsdp-store); rank 0 "
                                "does not start one"};
const Knob<bool> kFtJoin{"FSDP_FT_JOIN", false,
                         "this process replaces a lost rank of a running fault-tolerant job (fault_tolerance.enable): "
                         "it joins through the store at a step boundary and receives its state from the members"};
const Knob<int64_t> kFtAwaitJoinStep{
    "FSDP_FT_AWAIT_JOIN_STEP", 0,
    "for tests: every member waits before voting on this step (up to FSDP_RENDEZVOUS_TIMEOUT_SEC) until a replacement "
    "asked to join, "
    "so the job grows back right after it whatever the machine's load (0: off)",
    0};
const Knob<double> kHeartbeatTimeoutSec{"FSDP_HEARTBEAT_TIMEOUT_SEC", 20.0,
                                        "seconds without a heartbeat (through the store) after which a rank counts as "
                                        "frozen and the job fails naming it; 0: no heartbeat",
                                        0, kInf};
const Knob<int64_t> kStoreMaxConnections{
    "FSDP_STORE_MAX_CONNECTIONS", 1024,
    "store server: connections held at once (capped by the descriptor limit); beyond it the longest-idle one is "
    "closed, or accepting pauses",
    1, 1 << 20};
const Knob<double> kStoreIdleTimeoutSec{"FSDP_STORE_IDLE_TIMEOUT_SEC", 300.0,
                                        "store server: seconds a connection may stay open without a request in "
                                        "flight (clients reconnect on their next call)",
                                        0, kInf, true};
const Knob<double> kStoreIoTimeoutSec{"FSDP_STORE_IO_TIMEOUT_SEC", 10.0,
                                      "store server: seconds the rest of a request may take to arrive once its length "
                                      "prefix did, and a reply to be taken by the client",
                                      0, kInf, true};
const Knob<std::string> kRunId{"FSDP_RUN_ID", "default",
                               "namespace of the job's store keys and shared-memory names (fsdp-run sets a fresh one)"};
const Knob<std::string> kJobSecret{"FSDP_JOB_SECRET", "",
                                   "the job's shared secret, hex (at least 32 digits): authenticates every store "
                                   "connection and TCP handshake (fsdp-run generates one per job; listings hide it)"};
const Knob<std::string> kJobSecretFile{"FSDP_JOB_SECRET_FILE", "",
                                       "a file holding the job secret in hex, readable by its owner only (chmod "
                                       "600); not together with FSDP_JOB_SECRET"};
const Knob<std::string> kRendezvousDir{"FSDP_RENDEZVOUS_DIR", "",
                                       "folder of the file rendezvous of mpirun/srun jobs without a store (unset: "
                                       "TMPDIR, else /tmp)"};
const Knob<std::string> kHostId{"FSDP_HOST_ID", "",
                                "overrides the host identity (boot id + hostname) ranks compare to find who shares "
                                "memory"};
const Knob<std::string> kMasterAddr{"FSDP_MASTER_ADDR", "", "rendezvous store host; wins over MASTER_ADDR"};
const Knob<int64_t> kMasterPort{"FSDP_MASTER_PORT", 0, "rendezvous store port; wins over MASTER_PORT (0: unset)", 1,
                                65535};
const Knob<double> kRunGraceSec{"FSDP_RUN_GRACE_SEC", 5.0,
                                "fsdp-run: seconds between SIGTERM and SIGKILL of the ranks left after a failure", 0};
const Knob<double> kRunTermDelaySec{"FSDP_RUN_TERM_DELAY_SEC", 1.0,
                                    "fsdp-run: seconds the other ranks get to report their own error after the first "
                                    "failure, before SIGTERM",
                                    0};
const Knob<int64_t> kRestartCount{"FSDP_RESTART_COUNT", 0,
                                  "set by fsdp-run: which start of the job this is (0: the first; --max-restarts); "
                                  "the store keys of start k > 0 go under fsdp/<FSDP_RUN_ID>/attempt<k>/",
                                  0};
const Knob<int64_t> kMaxRestarts{"FSDP_MAX_RESTARTS", 0,
                                 "set by fsdp-run: its --max-restarts, for the program's messages", 0};
const Knob<std::string> kRestartCause{"FSDP_RESTART_CAUSE", "",
                                      "set by fsdp-run on a restart: the failure that ended the previous start "
                                      "(\"rank 1 was killed by signal 9 (SIGKILL)\")"};

const Knob<bool> kCachingAllocator{"FSDP_CACHING_ALLOCATOR", true,
                                   "keep released tracked buffers for reuse by size, and under fully_shard the C "
                                   "library heap's freed memory (0: hand each back at once, mapping and faulting "
                                   "them in again every step)"};
const Knob<bool> kUnitWindows{"FSDP_UNIT_WINDOWS", true,
                              "FSDP units take their all-gather outputs and reduce-scatter inputs from shared-memory "
                              "windows when the unit's group is on one host (0: plain tracked buffers)"};

// Read only to see whether the user chose; OpenBLAS and OpenMP parse the values themselves.
const Knob<std::string> kOpenblasNumThreads{"OPENBLAS_NUM_THREADS", "",
                                            "OpenBLAS's variable: BLAS threads per rank (unset: fsdp-run and fsdp-train "
                                            "use the cores available / local ranks)"};
const Knob<std::string> kOmpNumThreads{"OMP_NUM_THREADS", "",
                                       "OpenMP's variable; when it or OPENBLAS_NUM_THREADS is set, fsdp-run and "
                                       "fsdp-train leave the thread count alone"};
const Knob<std::string> kOpenblasCoretype{
    "OPENBLAS_CORETYPE", "",
    "OpenBLAS's variable: the kernels it runs (unset: its own pick by CPU model; where that falls back to "
    "pre-AVX2 kernels on an AVX2 or AVX-512 CPU, fsdp-train, fsdp-train-bench and fsdp-calibrate restart "
    "with Haswell or SkylakeX)"};

const Knob<std::string> kNcclHost{"FSDP_NCCL_HOST", "",
                                  "the address ncclGetUniqueId announces (unset: the first non-loopback IPv4 "
                                  "address)"};
const Knob<std::string> kNcclCommId{"NCCL_COMM_ID", "",
                                    "NCCL's host:port where rank 0 serves the rendezvous; ids then need no broadcast"};
const Knob<std::string> kNcclDebug{"FSDP_NCCL_DEBUG", "",
                                   "WARN prints every C API error, INFO also a line per rank joining; overrides "
                                   "NCCL_DEBUG"};
const Knob<std::string> kNcclDebugFallback{"NCCL_DEBUG", "", "NCCL's variable, read when FSDP_NCCL_DEBUG is unset"};

const Knob<int64_t> kFaultKillAfterCheckpointFiles{
    "FSDP_FAULT_KILL_AFTER_CHECKPOINT_FILES", 0,
    "fault injection for tests: a rank SIGKILLs itself after writing this many files of one checkpoint (0: off)", 0};
const Knob<std::string> kFaultKillAfterStep{
    "FSDP_FAULT_KILL_AFTER_STEP", "",
    "fault injection for tests: RANK:STEP[:WHEN][,...], fsdp-train's rank RANK SIGKILLs itself in step STEP at WHEN "
    "(default after: once the step and its checkpoint save are done; common/fault_injection.h lists the points), on "
    "the job's first start only (FSDP_RESTART_COUNT 0)"};

namespace {

using Parsed = std::variant<bool, int64_t, double, std::string>;

struct Cached {
  std::string text;
  Parsed value;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string_view, Cached>& cache() {
  static std::map<std::string_view, Cached> c;
  return c;
}

std::optional<std::string> env_text(std::string_view env) {
  const char* v = std::getenv(std::string(env).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void refuse(std::string_view env, const std::string& text, const std::string& accepts) {
  throw InvalidArgument(std::string(env) + "='" + text + "' is not " + accepts);
}

std::string range_text(double lo, double hi, bool lo_open) {
  std::string s;
  if (std::isfinite(lo)) {
    std::ostringstream o;
    o << lo;
    s = (lo_open ? "> " : ">= ") + o.str();
  }
  if (std::isfinite(hi)) {
    std::ostringstream o;
    o << hi;
    s += (s.empty() ? "<= " : " and <= ") + o.str();
  }
  return s;
}

template <class T>
void check_range(const Knob<T>& k, double v, const std::string& text, const std::string& what) {
  if ((k.lo_open ? v > k.lo : v >= k.lo) && v <= k.hi) return;
  refuse(k.env, text, what + " " + range_text(k.lo, k.hi, k.lo_open));
}

Parsed parse_text(const Knob<bool>& k, const std::string& t) {
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  refuse(k.env, t, "a boolean (1/0, true/false, yes/no, on/off)");
}

Parsed parse_text(const Knob<int64_t>& k, const std::string& t) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size())
    refuse(k.env, t, "an integer " + range_text(k.lo, k.hi, k.lo_open));
  check_range(k, static_cast<double>(v), t, "an integer");
  return v;
}

Parsed parse_text(const Knob<double>& k, const std::string& t) {
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || *end != '\0' || !std::isfinite(v))
    refuse(k.env, t, "a number " + range_text(k.lo, k.hi, k.lo_open));
  check_range(k, v, t, "a number");
  return v;
}

Parsed parse_text(const Knob<std::string>& k, const std::string& t) {
  if (k.choices.empty()) return t;
  std::string_view rest = k.choices;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == t) return t;
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  std::string list(k.choices);
  for (char& c : list) {
    if (c == '|') c = ',';
  }
  refuse(k.env, t, "one of " + list);
}

template <class T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "1" : "0";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else {
    std::ostringstream o;
    o << v;
    return o.str();
  }
}

template <class T>
std::string type_of(const Knob<T>& k) {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, std::string>) return k.choices.empty() ? "string" : std::string(k.choices);
  const std::string_view env = k.env;
  if (env.ends_with("_SEC")) return "seconds";
  if (env.ends_with("_BYTES")) return "bytes";
  return std::is_same_v<T, double> ? "number" : "int";
}

template <class T>
KnobInfo info_of(const Knob<T>& k) {
  KnobInfo i;
  i.env = std::string(k.env);
  i.type = type_of(k);
  i.default_value = text_of(k.fallback);
  i.set = k.is_set();
  i.doc = std::string(k.doc);
  try {
    // A secret never reaches a listing or a log.
    i.value = k.env == kJobSecret.env && i.set ? std::string("(set, hidden)") : text_of(k.get());
  } catch (const std::exception& e) {
    i.value = std::string("invalid: ") + e.what();
  }
  return i;
}

}  // namespace

template <class T>
T Knob<T>::get() const {
  const auto text = env_text(env);
  if (!text) return fallback;
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache().find(env);
  if (it == cache().end() || it->second.text != *text) {
    Parsed value = parse_text(*this, *text);  // throws before anything is cached
    it = cache().insert_or_assign(env, Cached{*text, std::move(value)}).first;
  }
  return std::get<T>(it->second.value);
}

template <class T>
T Knob<T>::parse(const std::string& text) const {
  return std::get<T>(parse_text(*this, text));
}

template <class T>
bool Knob<T>::is_set() const {
  return env_text(env).has_value();
}

template struct Knob<bool>;
template struct Knob<int64_t>;
template struct Knob<double>;
template struct Knob<std::string>;

std::vector<KnobInfo> all_knobs() {
  return {info_of(kTimeoutSec),
          info_of(kSmallMsgBytes),
          info_of(kFlagPathBytes),
          info_of(kStreamCopyBytes),
          info_of(kChunkBytes),
          info_of(kAlgo),
          info_of(kCheckCollectives),
          info_of(kFlightRecorderEntries),
          info_of(kFlightRecorderDir),
          info_of(kShmCopy),
          info_of(kShmCmaMinBytes),
          info_of(kTcpConnections),
          info_of(kTcpSocketBufferBytes),
          info_of(kTransport),
          info_of(kRendezvousTimeoutSec),
          info_of(kStoreExternal),
          info_of(kFtJoin),
          info_of(kFtAwaitJoinStep),
          info_of(kHeartbeatTimeoutSec),
          info_of(kStoreMaxConnections),
          info_of(kStoreIdleTimeoutSec),
          info_of(kStoreIoTimeoutSec),
          info_of(kRunId),
          info_of(kJobSecret),
          info_of(kJobSecretFile),
          info_of(kRendezvousDir),
          info_of(kHostId),
          info_of(kMasterAddr),
          info_of(kMasterPort),
          info_of(kRunGraceSec),
          info_of(kRunTermDelaySec),
          info_of(kRestartCount),
          info_of(kMaxRestarts),
          info_of(kRestartCause),
          info_of(kCachingAllocator),
          info_of(kUnitWindows),
          info_of(kOpenblasNumThreads),
          info_of(kOmpNumThreads),
          info_of(kOpenblasCoretype),
          info_of(kNcclHost),
          info_of(kNcclCommId),
          info_of(kNcclDebug),
          info_of(kNcclDebugFallback),
          info_of(kFaultKillAfterCheckpointFiles),
          info_of(kFaultKillAfterStep)};
}

std::string describe_knobs(std::string_view line_prefix) {
  std::string out;
  for (const auto& k : all_knobs()) {
    out += std::string(line_prefix) + k.env + "=" + k.value + (k.set ? "" : " (default)") + "\n";
  }
  return out;
}

}  // namespace fsdp::knobs
