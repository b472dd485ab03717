#include "collectives/transports/fabric_transport.h"

#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "collectives/transports/matching.h"
#include "collectives/types/errors.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

// How long cancel() lets the fabric finish an operation that may still touch the caller's buffer.
// A data receive that already matched cannot be recalled and would write into a freed buffer, so it
// gets time to land (it is moving: the sender only sends after clear-to-send). A data send only
// reads, and a send whose receiver gave up never starts moving, so it gets little.
constexpr auto kReceiveWithdrawWait = std::chrono::seconds(1);
constexpr auto kSendWithdrawWait = std::chrono::milliseconds(50);

struct PendingSend {
  RequestPtr request;
  const void* data;
  size_t bytes;
};

// A request whose bytes are in the fabric. user_buffer: the fabric reads or writes the caller's
// buffer (data transfers), not a copy of ours (eager messages).
struct Transfer {
  RequestPtr request;
  FabricOpPtr op;
  bool user_buffer;
};

struct Peer {
  ReceiveMatcher matcher;
  std::unordered_map<uint64_t, PendingSend> awaiting_clear;  // large sends, by message id
  std::unordered_map<uint64_t, Transfer> sending;            // eager and data sends, by message id
  std::unordered_map<uint64_t, Transfer> receiving;          // data receives, by data id
  // Data ids of withdrawn receives: their sender may still send under them, so they are never
  // handed out again (only matters once ids wrap, as MPI's do after 2^31 - 1).
  std::unordered_set<uint64_t> retired;
  uint64_t next_data_id = 1;
  bool hello = false;
  bool dead = false;
  bool lost = false;  // the peer is gone (vs. a protocol or local error)
  std::string reason;
};

class FabricTransport final : public Transport {
 public:
  FabricTransport(std::unique_ptr<Fabric> fabric, std::chrono::milliseconds timeout)
      : fabric_(std::move(fabric)), rank_(fabric_->rank()), size_(fabric_->size()), peers_(size_), self_(rank_) {
    start(timeout);
  }

  ~FabricTransport() override { fabric_.reset(); }  // while peers_ still exist, whatever it reports

  std::string_view name() const override { return fabric_->name(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) override {
    check_rank(peer);
    auto request = requests_.make(peer, bytes, true);
    if (peer == rank_) {
      self_.send(tag, data, bytes, request);
      return request;
    }
    Peer& p = peers_[peer];
    if (p.dead) {
      request->fail(p.reason, p.lost);
      return request;
    }
    const uint64_t id = next_message_id_++;
    if (bytes <= kFabricEagerBytes) {
      const MessageHeader h = make_header(MessageKind::kEager, tag, bytes, id);
      std::vector<std::byte> message(sizeof(h) + bytes);
      std::memcpy(message.data(), &h, sizeof(h));
      if (bytes) std::memcpy(message.data() + sizeof(h), data, bytes);
      auto op = fabric_->send_control(peer, std::move(message),
                                      [this, peer, id](const FabricResult& r) { sent(peer, id, r); });
      p.sending[id] = Transfer{request, std::move(op), false};
    } else {
      p.awaiting_clear[id] = PendingSend{request, data, bytes};
      send_control(peer, make_header(MessageKind::kRequestToSend, tag, bytes, id));
    }
    return request;
  }

  RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) override {
    check_rank(peer);
    auto request = requests_.make(peer, bytes, false);
    if (peer == rank_) {
      self_.recv(tag, data, bytes, request);
      return request;
    }
    Peer& p = peers_[peer];
    auto to = [&](const MessageHeader& h, const std::byte* eager, PostedRecv& r) { deliver(peer, h, eager, r); };
    p.matcher.receive(PostedRecv{tag, data, bytes, request}, p.dead, p.reason, p.lost, to);
    return request;
  }

  bool progress() override {
    bool moved = fabric_->progress();
    int from = -1;
    // Control messages first: what a peer sent before it went must count before its loss does.
    while (fabric_->next_control(from, inbox_)) {
      on_control(from, inbox_);
      moved = true;
    }
    for (FabricFailure& f : fabric_->take_failed_peers()) {
      fail_peer(f.peer, f.why, f.lost);
      moved = true;
    }
    for (auto& [peer, why, lost] : std::exchange(deferred_, {})) {
      fail_peer(peer, why, lost);
      moved = true;
    }
    return moved;
  }

  void cancel(const RequestPtr& request) override {
    const int peer = request->peer();
    if (peer == rank_) {
      self_.cancel(request);
      return;
    }
    Peer& p = peers_[peer];
    if (request->is_send()) {
      std::erase_if(p.awaiting_clear, [&](const auto& e) { return e.second.request == request; });
      withdraw(p.sending, request, kSendWithdrawWait);
    } else {
      p.matcher.cancel(request);
      for (const auto& [id, t] : p.receiving) {
        if (t.request == request) p.retired.insert(id);
      }
      withdraw(p.receiving, request, kReceiveWithdrawWait);
    }
  }

  std::string check_peer(int peer) override {
    if (peer < 0 || peer >= size_ || peer == rank_) return {};
    Peer& p = peers_[peer];
    if (!p.dead) {
      std::string why = fabric_->check_peer(peer);
      if (why.empty()) return {};
      progress();  // take in what it sent before it went
      fail_peer(peer, why, true);
    }
    return p.lost ? p.reason : std::string();
  }

 private:
  void check_rank(int peer) const {
    if (peer < 0 || peer >= size_) {
      throw InvalidArgument(std::string(fabric_->name()) + " transport: peer " + std::to_string(peer) +
                            " outside [0, " + std::to_string(size_) + ")");
    }
  }

  // A control message no request waits on (request-to-send, clear-to-send, hello).
  void send_control(int peer, const MessageHeader& h) {
    std::vector<std::byte> message(sizeof(h));
    std::memcpy(message.data(), &h, sizeof(h));
    fabric_->send_control(peer, std::move(message), [this, peer](const FabricResult& r) {
      if (!r.ok) deferred_.emplace_back(peer, r.error, r.peer_lost);
    });
  }

  // Completion of an eager or data send.
  void sent(int peer, uint64_t id, const FabricResult& r) {
    Peer& p = peers_[peer];
    auto it = p.sending.find(id);
    if (it == p.sending.end()) return;  // cancelled, or failed with the peer
    RequestPtr request = std::move(it->second.request);
    p.sending.erase(it);
    if (r.ok) {
      request->complete();
      return;
    }
    request->fail(r.error, r.peer_lost);
    deferred_.emplace_back(peer, r.error, r.peer_lost);
  }

  // Completion of a data receive.
  void received(int peer, uint64_t data_id, const FabricResult& r) {
    Peer& p = peers_[peer];
    auto it = p.receiving.find(data_id);
    if (it == p.receiving.end()) return;
    RequestPtr request = std::move(it->second.request);
    p.receiving.erase(it);
    if (!r.ok) {
      request->fail(r.error, r.peer_lost);
      deferred_.emplace_back(peer, r.error, r.peer_lost);
    } else if (r.bytes != request->bytes()) {  // the handshake agreed on the size: a fabric fault
      request->fail(size_mismatch_message(peer, r.bytes, rank_, request->bytes()), false);
    } else {
      request->complete();
    }
  }

  void on_control(int peer, const std::vector<std::byte>& message) {
    if (peer < 0 || peer >= size_ || peer == rank_) return;  // the fabric names only real peers
    Peer& p = peers_[peer];
    if (p.dead && !p.lost) return;  // after a protocol error nothing from it is trusted
    MessageHeader h{};
    if (message.size() < sizeof(h)) {
      return protocol_error(peer, "a control message of " + std::to_string(message.size()) + " bytes (the header is " +
                                      std::to_string(sizeof(h)) + ")");
    }
    std::memcpy(&h, message.data(), sizeof(h));
    const size_t attached = message.size() - sizeof(h);
    if (std::string why = check_header(h, kFabricEagerBytes); !why.empty()) return protocol_error(peer, why);
    if (attached != payload_bytes(h)) {
      return protocol_error(peer, "a frame of kind " + std::to_string(h.kind) + " for " + std::to_string(h.bytes) +
                                      " bytes with " + std::to_string(attached) + " attached");
    }
    // A real peer's hello is the first thing it sends (start()) and control messages keep their order,
    // so anything else first comes from something that is not a rank of this job (even if it held the
    // secret): refused at once, not kept until the start-up times out.
    if (!p.hello && !h.is(MessageKind::kHello)) {
      return protocol_error(peer, "a frame of kind " + std::to_string(h.kind) + " (" + std::to_string(h.bytes) +
                                      " bytes) before its hello");
    }
    switch (static_cast<MessageKind>(h.kind)) {
      case MessageKind::kHello:
        if (h.bytes != kProtocolVersion || h.id != static_cast<uint64_t>(peer) ||
            h.aux != static_cast<uint64_t>(size_)) {
          return protocol_error(peer, "a hello from rank " + std::to_string(h.id) + " of a job of " +
                                          std::to_string(h.aux) + " ranks, protocol version " +
                                          std::to_string(h.bytes) + " (another job, or a mixed installation?)");
        }
        p.hello = true;
        return;
      case MessageKind::kEager:
      case MessageKind::kRequestToSend: {
        // Match it, or keep it (and a copy of its payload) for the receive to come.
        auto to = [&](const MessageHeader& m, const std::byte* eager, PostedRecv& r) { deliver(peer, m, eager, r); };
        return p.matcher.arrive(h, message.data() + sizeof(h), attached, to);
      }
      case MessageKind::kClearToSend:
        return cleared(peer, h);
      case MessageKind::kData:
      case MessageKind::kPulled:
        break;
    }
    protocol_error(peer, "a frame of kind " + std::to_string(h.kind) + " where only control messages travel");
  }

  // Completes a matched receive from an eager payload, or posts a large one's data receive and clears it.
  void deliver(int peer, const MessageHeader& h, const std::byte* eager, PostedRecv& recv) {
    Peer& p = peers_[peer];
    const bool rendezvous = h.is(MessageKind::kRequestToSend);
    const Tag tag = h.tag();
    if (h.bytes != recv.bytes) {
      if (rendezvous && !p.dead) {
        MessageHeader reply = make_header(MessageKind::kClearToSend, tag, recv.bytes, h.id);
        reply.status = 1;
        send_control(peer, reply);
      }
      recv.request->fail(size_mismatch_message(peer, h.bytes, rank_, recv.bytes), false);
      return;
    }
    if (!rendezvous) {
      if (h.bytes) std::memcpy(recv.data, eager, h.bytes);
      recv.request->complete();
      return;
    }
    if (p.dead) {
      recv.request->fail(p.reason, p.lost);
      return;
    }
    const uint64_t data_id = next_data_id(p);
    auto op = fabric_->recv_data(peer, data_id, recv.data, recv.bytes,
                                 [this, peer, data_id](const FabricResult& r) { received(peer, data_id, r); });
    p.receiving[data_id] = Transfer{recv.request, std::move(op), true};
    MessageHeader reply = make_header(MessageKind::kClearToSend, tag, recv.bytes, h.id);
    reply.aux = data_id;
    send_control(peer, reply);
  }

  // A data id no transfer from this peer uses now. The fabric matches data on (peer, id) alone, so
  // this is what makes crossed messages impossible even where ids wrap (MPI's tag space).
  uint64_t next_data_id(Peer& p) {
    const uint64_t max = fabric_->max_data_id();
    for (;;) {
      const uint64_t id = p.next_data_id;
      p.next_data_id = id >= max ? 1 : id + 1;
      if (!p.receiving.contains(id) && !p.retired.contains(id)) return id;
    }
  }

  void cleared(int peer, const MessageHeader& h) {
    Peer& p = peers_[peer];
    auto it = p.awaiting_clear.find(h.id);
    if (it == p.awaiting_clear.end()) return;  // a cancelled send
    PendingSend send = it->second;
    p.awaiting_clear.erase(it);
    if (h.status != 0) {
      send.request->fail(size_mismatch_message(rank_, send.bytes, peer, h.bytes), false);
      return;
    }
    if (h.aux == 0 || h.aux > fabric_->max_data_id()) {
      send.request->fail("rank " + std::to_string(peer) + " cleared a send under data id " + std::to_string(h.aux),
                         false);
      return protocol_error(peer, "a clear-to-send with data id " + std::to_string(h.aux));
    }
    const uint64_t id = h.id;
    auto op = fabric_->send_data(peer, h.aux, send.data, send.bytes,
                                 [this, peer, id](const FabricResult& r) { sent(peer, id, r); });
    p.sending[id] = Transfer{send.request, std::move(op), true};
  }

  // Takes `request`'s transfer out of `transfers` and makes the fabric let go of it. Where the fabric
  // works on the caller's buffer, waits (bounded) until it has, so that the caller may free it.
  void withdraw(std::unordered_map<uint64_t, Transfer>& transfers, const RequestPtr& request, Clock::duration wait) {
    for (auto it = transfers.begin(); it != transfers.end(); ++it) {
      if (it->second.request != request) continue;
      Transfer t = std::move(it->second);
      transfers.erase(it);
      if (t.user_buffer) let_go(t.op, wait);
      return;
    }
  }

  void let_go(const FabricOpPtr& op, Clock::duration wait) {
    fabric_->cancel(op);
    const auto deadline = Clock::now() + wait;
    while (!op->finished && Clock::now() < deadline) {
      if (!fabric_->progress()) std::this_thread::yield();
    }
    if (!op->finished) {
      std::fprintf(stderr, "fsdp %s transport: rank %d: a withdrawn transfer is still in the fabric after %lld ms\n",
                   std::string(fabric_->name()).c_str(), rank_,
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()));
    }
  }

  // Fails everything pending with `peer`; later requests with it fail at once.
  void fail_peer(int peer, const std::string& why, bool lost) {
    Peer& p = peers_[peer];
    if (p.dead) return;
    p.dead = true;
    p.lost = lost;
    p.reason = why;
    p.matcher.fail_all(why, lost);
    for (auto& [id, s] : std::exchange(p.awaiting_clear, {})) s.request->fail(why, lost);
    auto sending = std::exchange(p.sending, {});
    auto receiving = std::exchange(p.receiving, {});
    for (auto& [id, t] : sending) t.request->fail(why, lost);
    for (auto& [id, t] : receiving) t.request->fail(why, lost);
    // Data still on its way could land in a receive buffer the caller is about to free.
    for (auto& [id, t] : receiving) let_go(t.op, kReceiveWithdrawWait);
    for (auto& [id, t] : sending) {
      if (t.user_buffer) fabric_->cancel(t.op);
    }
    fabric_->drop_peer(peer);
  }

  void protocol_error(int peer, const std::string& what) {
    fail_peer(peer, malformed_frame_message(peer, fabric_->name(), what), false);
  }

  void start(std::chrono::milliseconds timeout) {
    MessageHeader hello = make_header(MessageKind::kHello, Tag{}, kProtocolVersion, static_cast<uint64_t>(rank_));
    hello.aux = static_cast<uint64_t>(size_);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) send_control(peer, hello);
    }
    const ErrorContext ctx{rank_, -1, std::string(fabric_->name()) + "_connect", 0, 0};
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const bool moved = progress();
      std::string missing;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        const Peer& p = peers_[peer];
        if (p.dead) {
          ErrorContext c = ctx;
          c.peer = peer;
          throw CommError(c, "rank " + std::to_string(peer) + " failed during start-up: " + p.reason);
        }
        if (!p.hello) missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
      }
      if (missing.empty()) return;
      if (Clock::now() > deadline) {
        throw TimeoutError(ctx, "ranks " + missing + " never answered rank " + std::to_string(rank_) + " over " +
                                    std::string(fabric_->name()) + " within " + std::to_string(timeout.count()) +
                                    " ms (not started, or unreachable with this fabric configuration)");
      }
      if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::unique_ptr<Fabric> fabric_;
  int rank_;
  int size_;
  RequestPool requests_;
  std::vector<Peer> peers_;
  LoopbackMatcher self_;
  uint64_t next_message_id_ = 1;
  std::vector<std::byte> inbox_;
  // Peer failures that callbacks reported, applied in progress() (never from inside a callback).
  std::vector<std::tuple<int, std::string, bool>> deferred_;
};

}  // namespace

std::shared_ptr<Transport> make_fabric_transport(std::unique_ptr<Fabric> fabric,
                                                 std::chrono::milliseconds connect_timeout) {
  if (!fabric) throw InvalidArgument("make_fabric_transport: no fabric");
  const int rank = fabric->rank(), size = fabric->size();
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("fabric transport: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) +
                          ")");
  }
  return std::make_shared<FabricTransport>(std::move(fabric), connect_timeout);
}

}  // namespace fsdp
