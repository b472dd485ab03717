#include "collectives/transports/shm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <sstream>
#include <thread>
#include <vector>

#include "collectives/transports/matching.h"
#include "collectives/transports/process_identity.h"
#include "collectives/types/errors.h"
#include "common/knobs.h"

namespace fsdp {
namespace {

constexpr uint64_t kMagic = 0x6673647073686d31ull;  // "fsdpshm1"
constexpr size_t kRingSlots = 64;

// The control path speaks the protocol every framed transport shares (message_header.h): eager
// messages, and a request-to-send for a large payload, answered once matched by clear-to-send (the
// sender then streams the payload through the pair's data ring) or, with cross-memory attach, by
// kPulled once the receiver has copied it out of the sender's memory itself.
//
// Why shared memory is not a Fabric under fabric_transport.h: its control messages are fixed
// 256-byte ring slots written in place with a 200-byte inline payload, where a fabric's are heap
// vectors of up to 32 KiB handed over with a callback per message (an allocation and an indirect
// call on every sub-microsecond small message); its cross-memory attach path is a pull by the
// receiver from an address carried in the request-to-send, answered by kPulled, which the fabric's
// clear-to-send-then-send exchange cannot express; and it needs no start-up hello (the segment
// itself checks the job). What it shares is the header, the kinds, receive matching, the
// size-mismatch verdict and loopback.

// kAuto: cross-memory attach for payloads of at least cma_min_bytes when the kernel allows it
// (probed per peer on first use), staging for smaller ones and where it does not.
enum class CopyMode : int32_t { kStaging = 1, kCrossMemory = 2, kAuto = 3 };

constexpr size_t kDataSlots = 4;  // pieces in flight per ordered pair

// Large payloads of one ordered pair, streamed in pieces of up to slot_bytes, in clear-to-send order.
struct DataRing {
  alignas(64) std::atomic<uint64_t> head;  // pieces published by the sender
  alignas(64) std::atomic<uint64_t> tail;  // pieces consumed by the receiver
  uint32_t piece_bytes[kDataSlots];
};

// One control message, a slot of a pair's ring: the shared header and an inline payload, 256 bytes
// in all. A request-to-send carries the payload's address in the sender (header.aux) for a pull;
// clear-to-send and kPulled carry the receiver's size (header.bytes) for a size-mismatch verdict.
struct Message {
  MessageHeader header;
  std::byte payload[kShmInlineBytes];
  std::byte unused[256 - sizeof(MessageHeader) - kShmInlineBytes];
};
static_assert(sizeof(Message) == 256);

struct Ring {
  alignas(64) std::atomic<uint64_t> head;  // written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer
  alignas(64) Message slots[kRingSlots];
};

struct SegmentHeader {
  uint64_t magic;
  int32_t size;
  int32_t copy_mode;  // CopyMode, chosen by rank 0 so every rank agrees
  uint64_t slot_bytes;
  uint64_t cma_min_bytes;  // kAuto's threshold, rank 0's choice
  std::atomic<int32_t> attached;
  std::atomic<int32_t> ready;
};

struct RankInfo {
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> probe_addr;  // a word each peer reads once to prove cross-memory attach works
};

uint64_t g_probe_word = 0x5eed5eed5eed5eedull;

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

// 64 KiB slots keep a pair's pieces in flight (4 x 64 KiB) cache-resident, so the receiver's copy
// out mostly hits cache (32 KiB to 256 KiB measured within noise of each other; docs/transports.md).
// Slots shrink as the job grows so n^2 pairs stay within 256 MiB of sparse shared memory.
size_t slot_bytes_for(int n) {
  const size_t budget = 256ull << 20;
  const size_t per_slot = budget / (static_cast<size_t>(n) * n * kDataSlots);
  return std::clamp<size_t>(per_slot / 4096 * 4096, 16 << 10, 64 << 10);
}

struct Layout {
  int size;
  size_t slot_bytes;
  size_t ranks_offset, rings_offset, data_rings_offset, data_slots_offset, total;
  explicit Layout(int n) : size(n), slot_bytes(slot_bytes_for(n)) {
    const size_t pairs = static_cast<size_t>(n) * n;
    ranks_offset = align64(sizeof(SegmentHeader));
    rings_offset = align64(ranks_offset + sizeof(RankInfo) * n);
    data_rings_offset = align64(rings_offset + sizeof(Ring) * pairs);
    data_slots_offset = (data_rings_offset + sizeof(DataRing) * pairs + 4095) / 4096 * 4096;
    total = data_slots_offset + pairs * kDataSlots * slot_bytes;
  }
};

CopyMode copy_mode_from_env() {
  const std::string v = knobs::kShmCopy.get();
  return v == "staging" ? CopyMode::kStaging : v == "cma" ? CopyMode::kCrossMemory : CopyMode::kAuto;
}

size_t cma_min_bytes_from_env() {
  const int64_t bytes = knobs::kShmCmaMinBytes.get();
  if (bytes <= static_cast<int64_t>(kShmInlineBytes)) {  // inline payloads never take the CMA path
    throw InvalidArgument("FSDP_SHM_CMA_MIN_BYTES='" + std::to_string(bytes) + "' must be a byte count above " +
                          std::to_string(kShmInlineBytes));
  }
  return static_cast<size_t>(bytes);
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

class ShmTransport final : public Transport {
 public:
  ShmTransport(const std::string& job, int rank, int size, std::chrono::milliseconds timeout,
               std::vector<int> job_ranks)
      : rank_(rank), size_(size), layout_(size), peers_(size), self_(rank), job_ranks_(std::move(job_ranks)) {
    attach(job, timeout);
  }
  ~ShmTransport() override {
    if (base_) ::munmap(base_, layout_.total);
  }

  std::string_view name() const override { return "shm"; }
  bool shares_host_memory() const override { return true; }
  // Every rank answers alike: no two endpoints of the job share a process.
  bool separate_processes() const override {
    std::vector<pid_t> pids(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) pids[r] = const_cast<ShmTransport*>(this)->info(r).pid.load(std::memory_order_acquire);
    std::sort(pids.begin(), pids.end());
    return std::adjacent_find(pids.begin(), pids.end()) == pids.end();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) override {
    auto request = requests_.make(peer, bytes, true);
    if (peer == rank_) {
      self_.send(tag, data, bytes, request);  // matched in memory, no ring involved
      return request;
    }
    Message m{};
    if (bytes <= kShmInlineBytes) {
      m.header = make_header(MessageKind::kEager, tag, bytes, 0);
      if (bytes) std::memcpy(m.payload, data, bytes);
      post(peer, m);
      request->complete();  // the payload is already in the ring or the outbox
    } else {
      m.header = make_header(MessageKind::kRequestToSend, tag, bytes, next_send_id_++);
      m.header.aux = reinterpret_cast<uint64_t>(data);
      peers_[peer].sends_in_flight.push_back({m.header.id, request, static_cast<const std::byte*>(data), bytes});
      post(peer, m);
    }
    return request;
  }

  RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) override {
    auto request = requests_.make(peer, bytes, false);
    if (peer == rank_) {
      self_.recv(tag, data, bytes, request);
      return request;
    }
    auto to = [&](const MessageHeader& h, const std::byte* eager, PostedRecv& r) { deliver(peer, h, eager, r); };
    // A peer's loss is seen by the engine's process check (check_peer), not here.
    peers_[peer].matcher.receive(PostedRecv{tag, data, bytes, request}, false, {}, false, to);
    return request;
  }

  bool progress() override {
    bool moved = false;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      moved |= flush_outbox(peer);
      Ring& in = ring(peer, rank_);
      uint64_t tail = in.tail.load(std::memory_order_relaxed);
      const uint64_t head = in.head.load(std::memory_order_acquire);
      for (; tail < head; ++tail) {
        handle(peer, in.slots[tail % kRingSlots]);
        in.tail.store(tail + 1, std::memory_order_release);
        moved = true;
      }
      moved |= stream_out(peer);
      moved |= stream_in(peer);
    }
    return moved;
  }

  void cancel(const RequestPtr& request) override {
    if (request->peer() == rank_) {
      self_.cancel(request);
      return;
    }
    Peer& p = peers_[request->peer()];
    // A payload already streaming keeps its place in the data ring (the peer expects its bytes), but
    // its buffer is never touched again.
    if (request->is_send()) {
      p.sends_in_flight.remove_if([&](const PendingSend& e) { return e.request == request; });
      for (Transfer& t : p.streaming) {
        if (t.request == request) t.data = nullptr;
      }
    } else {
      p.matcher.cancel(request);
      for (Transfer& t : p.incoming) {
        if (t.request == request) t.data = nullptr;
      }
    }
  }

  std::string check_peer(int peer) override {
    const pid_t pid = info(peer).pid.load();
    if (process_exited(pid)) return "process " + std::to_string(pid) + " of " + who(peer) + " exited";
    return {};
  }

 private:
  struct PendingSend {
    uint64_t id;
    RequestPtr request;
    const std::byte* data;
    size_t bytes;
  };
  // A staged payload on its way through a data ring; data is null once cancelled.
  struct Transfer {
    RequestPtr request;
    std::byte* data;
    size_t bytes;
    size_t done = 0;
  };
  enum class Cma : uint8_t { kUnknown, kAllowed, kDenied };
  struct Peer {
    Cma cma = Cma::kUnknown;  // whether this rank may read the peer's memory (kAuto probes once)
    ReceiveMatcher matcher;
    PooledList<PendingSend> sends_in_flight{pooled<PendingSend>()};  // rendezvous sends awaiting an ack or a clear-to-send
    PooledDeque<Transfer> streaming{pooled<Transfer>()};  // sends cleared to stream, in clear-to-send order
    PooledDeque<Transfer> incoming{pooled<Transfer>()};   // receives whose payload streams in, in the same order
    PooledList<Message> outbox{pooled<Message>()};  // messages the full ring could not take yet
  };

  DataRing& data_ring(int from, int to) {
    auto* rings = reinterpret_cast<DataRing*>(static_cast<std::byte*>(base_) + layout_.data_rings_offset);
    return rings[static_cast<size_t>(from) * size_ + to];
  }
  std::byte* data_slot(int from, int to, uint64_t index) {
    const size_t pair = static_cast<size_t>(from) * size_ + to;
    return static_cast<std::byte*>(base_) + layout_.data_slots_offset +
           (pair * kDataSlots + index % kDataSlots) * layout_.slot_bytes;
  }

  // Copies pieces of cleared sends into free slots of our data ring to `peer`.
  bool stream_out(int peer) {
    Peer& p = peers_[peer];
    DataRing& ring_out = data_ring(rank_, peer);
    bool moved = false;
    while (!p.streaming.empty()) {
      const uint64_t head = ring_out.head.load(std::memory_order_relaxed);
      if (head - ring_out.tail.load(std::memory_order_acquire) >= kDataSlots) break;
      Transfer& t = p.streaming.front();
      const size_t piece = std::min(layout_.slot_bytes, t.bytes - t.done);
      if (t.data) std::memcpy(data_slot(rank_, peer, head), t.data + t.done, piece);
      ring_out.piece_bytes[head % kDataSlots] = static_cast<uint32_t>(piece);
      ring_out.head.store(head + 1, std::memory_order_release);
      t.done += piece;
      moved = true;
      if (t.done == t.bytes) {
        if (t.data) t.request->complete();  // the payload is out of the caller's buffer
        p.streaming.pop_front();
      }
    }
    return moved;
  }

  // Copies published pieces from `peer`'s data ring into the receive they belong to.
  bool stream_in(int peer) {
    Peer& p = peers_[peer];
    DataRing& ring_in = data_ring(peer, rank_);
    bool moved = false;
    while (!p.incoming.empty()) {
      const uint64_t tail = ring_in.tail.load(std::memory_order_relaxed);
      if (tail == ring_in.head.load(std::memory_order_acquire)) break;
      Transfer& t = p.incoming.front();
      const size_t piece = ring_in.piece_bytes[tail % kDataSlots];
      if (t.data) std::memcpy(t.data + t.done, data_slot(peer, rank_, tail), piece);
      ring_in.tail.store(tail + 1, std::memory_order_release);
      t.done += piece;
      moved = true;
      if (t.done == t.bytes) {
        if (t.data) t.request->complete();
        p.incoming.pop_front();
      }
    }
    return moved;
  }

  Ring& ring(int from, int to) {
    auto* rings = reinterpret_cast<Ring*>(static_cast<std::byte*>(base_) + layout_.rings_offset);
    return rings[static_cast<size_t>(from) * size_ + to];
  }
  RankInfo& info(int r) {
    return reinterpret_cast<RankInfo*>(static_cast<std::byte*>(base_) + layout_.ranks_offset)[r];
  }
  SegmentHeader& header() { return *static_cast<SegmentHeader*>(base_); }

  bool try_write(int peer, const Message& m) {
    Ring& out = ring(rank_, peer);
    const uint64_t head = out.head.load(std::memory_order_relaxed);
    if (head - out.tail.load(std::memory_order_acquire) >= kRingSlots) return false;
    const size_t used = offsetof(Message, payload) + payload_bytes(m.header);
    std::memcpy(static_cast<void*>(&out.slots[head % kRingSlots]), &m, used);
    out.head.store(head + 1, std::memory_order_release);
    return true;
  }

  // Keeps per-peer order: nothing overtakes what already waits in the outbox.
  void post(int peer, const Message& m) {
    Peer& p = peers_[peer];
    if (!p.outbox.empty() || !try_write(peer, m)) p.outbox.push_back(m);
  }

  bool flush_outbox(int peer) {
    Peer& p = peers_[peer];
    bool moved = false;
    while (!p.outbox.empty() && try_write(peer, p.outbox.front())) {
      p.outbox.pop_front();
      moved = true;
    }
    return moved;
  }

  void handle(int peer, const Message& m) {
    Peer& p = peers_[peer];
    const MessageHeader& h = m.header;
    if (h.is(MessageKind::kPulled) || h.is(MessageKind::kClearToSend)) {
      for (auto it = p.sends_in_flight.begin(); it != p.sends_in_flight.end(); ++it) {
        if (it->id != h.id) continue;
        if (h.status != 0) {
          it->request->fail(h.bytes != it->bytes
                                ? size_mismatch_message(job_rank(rank_), it->bytes, job_rank(peer), h.bytes)
                                : who(peer) + " could not copy the message",
                            false);
        } else if (h.is(MessageKind::kPulled)) {
          it->request->complete();
        } else {
          p.streaming.push_back({it->request, const_cast<std::byte*>(it->data), it->bytes});
        }
        p.sends_in_flight.erase(it);
        return;
      }
      return;  // a cancelled send
    }
    // Eager or request-to-send: to its receive, or parked (the payload copied out of the slot).
    auto to = [&](const MessageHeader& mh, const std::byte* eager, PostedRecv& r) { deliver(peer, mh, eager, r); };
    p.matcher.arrive(h, m.payload, payload_bytes(h), to);
  }

  // Completes a matched receive: from the inline payload, or by pulling from the sender's memory.
  void deliver(int peer, const MessageHeader& h, const std::byte* eager, PostedRecv& recv) {
    std::string error;
    bool lost = false;
    const bool rendezvous = h.is(MessageKind::kRequestToSend);
    if (h.bytes != recv.bytes) {
      error = size_mismatch_message(job_rank(peer), h.bytes, job_rank(rank_), recv.bytes);
    } else if (!rendezvous) {
      if (h.bytes) std::memcpy(recv.data, eager, h.bytes);
    }
    const bool pulled = rendezvous && error.empty() && pulls(peer, h.bytes);
    if (pulled) error = pull(peer, recv.data, h.aux, h.bytes, lost);
    if (rendezvous) {
      Message reply{};
      reply.header = make_header(pulled ? MessageKind::kPulled : MessageKind::kClearToSend, h.tag(), recv.bytes, h.id);
      reply.header.status = error.empty() ? 0 : 1;
      post(peer, reply);
      if (error.empty() && !pulled) {
        // Completes in stream_in once the last piece has arrived.
        peers_[peer].incoming.push_back({recv.request, static_cast<std::byte*>(recv.data), recv.bytes});
        return;
      }
    }
    if (error.empty()) {
      recv.request->complete();
    } else {
      recv.request->fail(error, lost);
    }
  }

  // Whether a rendezvous payload of `bytes` from `peer` is pulled with cross-memory attach (else
  // it streams through the staging ring).
  bool pulls(int peer, size_t bytes) {
    if (mode_ == CopyMode::kCrossMemory) return true;
    if (mode_ == CopyMode::kStaging || bytes < cma_min_bytes_) return false;
    Peer& p = peers_[peer];
    if (p.cma == Cma::kUnknown) {
      // One word read proves the kernel lets us; if not (ptrace scope, another user), stage.
      uint64_t word = 0;
      bool lost = false;
      const bool ok = pull(peer, &word, info(peer).probe_addr.load(), sizeof(word), lost).empty() &&
                      word == g_probe_word;
      p.cma = ok ? Cma::kAllowed : Cma::kDenied;
    }
    return p.cma == Cma::kAllowed;
  }

  std::string pull(int peer, void* dst, uint64_t src, size_t bytes, bool& lost) {
    const pid_t pid = info(peer).pid.load();
    size_t done = 0;
    while (done < bytes) {
      iovec local{static_cast<std::byte*>(dst) + done, bytes - done};
      iovec remote{reinterpret_cast<void*>(src + done), bytes - done};
      const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const int err = n < 0 ? errno : EIO;
      lost = err == ESRCH;
      return "process_vm_readv from " + who(peer) + " (pid " + std::to_string(pid) + ") failed: " + errno_text(err);
    }
    return {};
  }

  void attach(const std::string& job, std::chrono::milliseconds timeout) {
    const std::string name = "/fsdp-" + job;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    ErrorContext ctx{job_rank(rank_), -1, "shm_connect", 0, layout_.total};
    int fd = -1;
    // Rank 0 owns the name: it goes once every rank has attached, and also when the start fails (a
    // rank that never came), so no segment outlives the job in /dev/shm.
    struct UnlinkAtExit {
      const std::string& name;
      bool owner;
      ~UnlinkAtExit() {
        if (owner) ::shm_unlink(name.c_str());
      }
    } unlink_at_exit{name, rank_ == 0};
    if (rank_ == 0) {
      ::shm_unlink(name.c_str());  // a stale segment of a crashed job with the same name
      fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) throw CommError(ctx, "shm_open(" + name + ") failed: " + errno_text(errno));
      if (::ftruncate(fd, static_cast<off_t>(layout_.total)) != 0) {
        const int err = errno;
        ::close(fd);
        throw CommError(ctx, "ftruncate of " + name + " to " + std::to_string(layout_.total) +
                                 " bytes failed (is /dev/shm large enough?): " + errno_text(err));
      }
    } else {
      while ((fd = ::shm_open(name.c_str(), O_RDWR, 0600)) < 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw TimeoutError(ctx, who(0) + " never created shared-memory segment " + name);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      struct stat st{};
      while (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < layout_.total) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::close(fd);
          throw TimeoutError(ctx, "segment " + name + " never reached its size");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    base_ = ::mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      throw CommError(ctx, "mmap of " + name + " failed: " + errno_text(errno));
    }
    if (rank_ == 0) {
      header().size = size_;
      header().copy_mode = static_cast<int32_t>(copy_mode_from_env());
      header().slot_bytes = layout_.slot_bytes;
      header().cma_min_bytes = cma_min_bytes_from_env();
      header().magic = kMagic;
      header().ready.store(1, std::memory_order_release);
    }
    while (header().ready.load(std::memory_order_acquire) != 1) {
      if (std::chrono::steady_clock::now() > deadline) throw TimeoutError(ctx, "segment " + name + " never became ready");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (header().magic != kMagic || header().size != size_) {
      throw CommError(ctx, "segment " + name + " belongs to a job of " + std::to_string(header().size) +
                               " ranks, not " + std::to_string(size_) + " (two jobs share a name?)");
    }
    info(rank_).probe_addr.store(reinterpret_cast<uint64_t>(&g_probe_word));
    info(rank_).pid.store(::getpid(), std::memory_order_release);
    header().attached.fetch_add(1);
    while (header().attached.load() < size_) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (int r = 0; r < size_; ++r) {
          if (info(r).pid.load() == 0) missing += " " + std::to_string(job_rank(r));
        }
        throw TimeoutError(ctx, "ranks" + missing + " never attached to " + name);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    mode_ = static_cast<CopyMode>(header().copy_mode);
    cma_min_bytes_ = header().cma_min_bytes;
    if (mode_ == CopyMode::kCrossMemory) probe_cross_memory_attach();
  }

  // Fails at start-up, with the fix, where the kernel forbids reading a peer's memory.
  void probe_cross_memory_attach() {
    if (size_ == 1) return;
    const int peer = (rank_ + 1) % size_;
    uint64_t word = 0;
    bool lost = false;
    std::string error = pull(peer, &word, info(peer).probe_addr.load(), sizeof(word), lost);
    if (error.empty() && word != g_probe_word) error = "read back the wrong value";
    if (!error.empty()) {
      throw CommError(ErrorContext{job_rank(rank_), job_rank(peer), "shm_connect", 0, sizeof(word)},
                      "cross-memory attach is not permitted: " + error +
                          ". Run all ranks as one user, allow ptrace between them (kernel.yama.ptrace_scope=0, or "
                          "CAP_SYS_PTRACE in containers), or choose another transport");
    }
  }

  // Errors name job ranks: a segment over one host's ranks numbers them 0..size-1 (job_ranks_ maps back).
  int job_rank(int r) const { return job_ranks_.empty() ? r : job_ranks_[static_cast<size_t>(r)]; }
  std::string who(int r) const { return "rank " + std::to_string(job_rank(r)); }

  int rank_;
  int size_;
  RequestPool requests_;
  Layout layout_;
  void* base_ = nullptr;
  uint64_t next_send_id_ = 1;
  CopyMode mode_ = CopyMode::kAuto;
  size_t cma_min_bytes_ = static_cast<size_t>(knobs::kShmCmaMinBytes.fallback);
  std::vector<Peer> peers_;
  LoopbackMatcher self_;
  std::vector<int> job_ranks_;  // job rank of each segment rank; empty: the same numbers
};

}  // namespace

std::shared_ptr<Transport> make_shm_transport(const std::string& job, int rank, int size,
                                              std::chrono::milliseconds timeout, std::vector<int> job_ranks) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("shm transport: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  if (job.empty() || job.find('/') != std::string::npos) {
    throw InvalidArgument("shm transport: job name '" + job + "' must be non-empty and contain no '/'");
  }
  if (!job_ranks.empty() && static_cast<int>(job_ranks.size()) != size) {
    throw InvalidArgument("shm transport: " + std::to_string(job_ranks.size()) + " job ranks for " +
                          std::to_string(size) + " segment ranks");
  }
  return std::make_shared<ShmTransport>(job, rank, size, timeout, std::move(job_ranks));
}

}  // namespace fsdp
