#include "collectives/transports/tcp.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <unordered_map>
#include <utility>

#include "collectives/core/errors.h"
#include "collectives/transports/matching.h"

// Why raw non-blocking sockets polled with ::poll and not Asio's completion handlers driven by
// io_context::poll(): the progress engine calls progress() in a tight loop, and one poll(2) with a
// zero timeout over every connection is the cheapest possible "anything to do?" (a single syscall,
// no handler allocation, no reactor queue). Reads then land straight in the posted receive buffer
// at the offset the frame names, which a handler-per-read design would make awkward. Asio still does
// what it is good at: resolving names, opening, binding, listening, accepting, connecting and setting
// socket options; the data path uses the native handles.

namespace fsdp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kFrameMagic = 0x66726d31;  // "frm1": catches a stream that lost its framing
// No single message is this large; a header claiming more is corrupt, not a request to allocate it.
constexpr uint64_t kMaxMessageBytes = 1ull << 40;
// Large payloads are striped across a pair's connections in pieces of at least this many bytes, so
// that a medium message does not pay a frame header and a syscall per few kilobytes.
constexpr size_t kMinStripeBytes = 256 * 1024;

// Small payloads go eager (with their header; the send completes at once; the receiver stages them
// if no receive is posted yet, at most kTcpEagerBytes each). Large ones use a receiver-driven
// rendezvous: kRequestToSend announces them, the receiver answers kClearToSend once a receive has
// matched (naming its transfer id), and only then does the sender stream kData pieces, which the
// receiver reads straight into the posted buffer. So the receiver never buffers a large payload, and
// a sender never streams into a receiver that has nowhere to put the bytes. The price is one round
// trip per large message, small beside its transfer time.
enum class Kind : uint16_t { kEager = 1, kRequestToSend = 2, kClearToSend = 3, kData = 4 };

// 48 bytes, host byte order (the ranks of one job share an architecture).
struct FrameHeader {
  uint32_t magic;
  uint16_t kind;
  uint16_t status;  // clear-to-send: 0 ok, 1 size mismatch (bytes then holds the receiver's size)
  uint64_t tag_context;
  uint64_t tag_op;
  uint64_t bytes;  // eager, request-to-send: the message size; data: this piece's size
  uint64_t id;     // eager, request-to-send, clear-to-send: the sender's message id; data: the receiver's transfer id
  uint64_t aux;    // clear-to-send: the receiver's transfer id; data: the piece's offset in the message
};
static_assert(sizeof(FrameHeader) == 48);

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

tcp::endpoint resolve(asio::io_context& io, const TcpEndpoint& e, const ErrorContext& ctx) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(e.host, std::to_string(e.port), tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    throw CommError(ctx, "cannot resolve '" + e.host + "': " + (ec ? ec.message() : std::string("no addresses")));
  }
  return results.begin()->endpoint();
}

std::string endpoint_text(const tcp::endpoint& e) { return TcpEndpoint{e.address().to_string(), e.port()}.to_string(); }

// A payload piece on its way out; shared by the pieces of one striped send. data is null once cancelled.
struct OutTransfer {
  RequestPtr request;
  const std::byte* data;
  size_t pieces_left;
};

struct OutFrame {
  FrameHeader header;
  std::vector<std::byte> owned;           // an eager payload, copied so the send completes at once
  std::shared_ptr<OutTransfer> transfer;  // a data piece: the payload is transfer->data + header.aux
  size_t sent = 0;                        // header and payload bytes written so far
};

// The frame being read from one connection.
struct Reader {
  FrameHeader header;
  size_t header_got = 0;
  size_t payload_got = 0;
  std::vector<std::byte> staging;  // an eager payload
};

struct Connection {
  std::unique_ptr<tcp::socket> socket;
  std::deque<OutFrame> out;
  Reader reader;
  int fd() const { return socket->native_handle(); }
};

struct PendingSend {
  RequestPtr request;
  const std::byte* data;
  size_t bytes;
};

// A matched large receive whose payload streams in; data is null once cancelled (pieces still
// arriving are then read and dropped, so the stream keeps its framing).
struct Incoming {
  RequestPtr request;
  std::byte* data;
  size_t bytes;
  size_t received = 0;
};

struct Peer {
  std::vector<Connection> connections;
  ReceiveMatcher<FrameHeader> matcher;
  std::unordered_map<uint64_t, PendingSend> awaiting_clear;  // by our message id
  std::unordered_map<uint64_t, Incoming> incoming;           // by our transfer id
  size_t next_connection = 0;                                // where the next striped send starts
  bool dead = false;
  bool lost = false;  // the connection closed (vs. a protocol error)
  std::string reason;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, TcpListener listener, const std::vector<TcpEndpoint>& peers,
               std::chrono::milliseconds timeout, TcpOptions options)
      : rank_(rank), size_(size), options_(options), peers_(size), self_(rank) {
    for (Peer& p : peers_) p.connections.resize(options_.connections_per_peer);
    connect_all(std::move(listener), peers, timeout);
  }

  ~TcpTransport() override {
    // Eager sends completed when they were queued; give what still waits in user space a moment to
    // reach the kernel, which delivers it even after close. Data pieces belong to abandoned sends.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    for (int peer = 0; peer < size_; ++peer) {
      for (Connection& c : peers_[peer].connections) {
        std::erase_if(c.out, [](const OutFrame& f) { return f.transfer && f.sent == 0; });
      }
    }
    for (bool pending = true; pending && Clock::now() < deadline;) {
      pending = false;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_ || peers_[peer].dead) continue;
        for (size_t c = 0; c < peers_[peer].connections.size(); ++c) {
          write(peer, c);
          pending |= !peers_[peer].dead && !peers_[peer].connections[c].out.empty();
        }
      }
      if (pending) ::poll(nullptr, 0, 1);
    }
  }

  std::string_view name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) override {
    check_rank(peer);
    auto request = std::make_shared<Request>(peer, bytes, true);
    if (peer == rank_) {
      self_.send(tag, data, bytes, request);  // matched in memory, no socket involved
      return request;
    }
    Peer& p = peers_[peer];
    if (p.dead) {
      request->fail(p.reason, p.lost);
      return request;
    }
    OutFrame f{};
    f.header = header(Kind::kEager, tag, bytes, next_send_id_++);
    if (bytes <= kTcpEagerBytes) {
      const auto* src = static_cast<const std::byte*>(data);
      f.owned.assign(src, src + bytes);
      Connection& conn = p.connections[0];
      const bool idle = conn.out.empty();
      conn.out.push_back(std::move(f));
      request->complete();  // the payload is in our outbox; the transport delivers it
      // Hand it to the kernel now where the socket takes it: a rank that completes its last send and
      // exits (or dies) at once must not leave the message behind in user space.
      if (idle) write(peer, 0);
    } else {
      f.header.kind = static_cast<uint16_t>(Kind::kRequestToSend);
      p.awaiting_clear[f.header.id] = {request, static_cast<const std::byte*>(data), bytes};
      p.connections[0].out.push_back(std::move(f));
    }
    return request;
  }

  RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) override {
    check_rank(peer);
    auto request = std::make_shared<Request>(peer, bytes, false);
    if (peer == rank_) {
      self_.recv(tag, data, bytes, request);
      return request;
    }
    Peer& p = peers_[peer];
    auto to = [&](const FrameHeader& h, const std::byte* eager, PostedRecv& r) { deliver(peer, h, eager, r); };
    p.matcher.receive(PostedRecv{tag, data, bytes, request}, p.dead, p.reason, p.lost, to);
    return request;
  }

  bool progress() override {
    pollfds_.clear();
    poll_index_.clear();
    for (int peer = 0; peer < size_; ++peer) {
      Peer& p = peers_[peer];
      if (peer == rank_ || p.dead) continue;
      for (size_t c = 0; c < p.connections.size(); ++c) {
        const Connection& conn = p.connections[c];
        const short events = static_cast<short>(POLLIN | (conn.out.empty() ? 0 : POLLOUT));
        pollfds_.push_back(pollfd{conn.fd(), events, 0});
        poll_index_.emplace_back(peer, c);
      }
    }
    if (pollfds_.empty()) return false;
    if (::poll(pollfds_.data(), pollfds_.size(), 0) <= 0) return false;
    bool moved = false;
    for (size_t i = 0; i < pollfds_.size(); ++i) {
      const short revents = pollfds_[i].revents;
      const auto [peer, c] = poll_index_[i];
      if (revents == 0 || peers_[peer].dead) continue;
      if (revents & (POLLIN | POLLERR | POLLHUP)) moved |= read(peer, c);
      if (!peers_[peer].dead && (revents & POLLOUT)) moved |= write(peer, c);
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
      // A send awaiting clearance is forgotten (a late clear-to-send for it is ignored). Pieces already
      // queued are dropped unless partly written; that one is finished with zeros so the stream keeps
      // its framing. Either way the caller's buffer is never read again.
      std::erase_if(p.awaiting_clear, [&](const auto& e) { return e.second.request == request; });
      for (Connection& c : p.connections) {
        for (OutFrame& f : c.out) {
          if (f.transfer && f.transfer->request == request) f.transfer->data = nullptr;
        }
        std::erase_if(c.out, [](const OutFrame& f) { return f.transfer && !f.transfer->data && f.sent == 0; });
      }
    } else {
      p.matcher.cancel(request);
      for (auto& [id, in] : p.incoming) {
        if (in.request == request) in.data = nullptr;
      }
    }
  }

  std::string check_peer(int peer) override {
    if (peer < 0 || peer >= size_ || peer == rank_) return {};
    const Peer& p = peers_[peer];
    return p.dead && p.lost ? p.reason : std::string();
  }

 private:
  void check_rank(int peer) const {
    if (peer < 0 || peer >= size_) {
      throw InvalidArgument("tcp transport: peer " + std::to_string(peer) + " outside [0, " + std::to_string(size_) +
                            ")");
    }
  }

  static FrameHeader header(Kind kind, const Tag& tag, uint64_t bytes, uint64_t id) {
    FrameHeader h{};
    h.magic = kFrameMagic;
    h.kind = static_cast<uint16_t>(kind);
    h.tag_context = tag.context;
    h.tag_op = tag.op;
    h.bytes = bytes;
    h.id = id;
    return h;
  }

  // Completes a matched receive from an eager payload, or clears a large one to stream in.
  void deliver(int peer, const FrameHeader& h, const std::byte* eager, PostedRecv& recv) {
    Peer& p = peers_[peer];
    const bool rendezvous = h.kind == static_cast<uint16_t>(Kind::kRequestToSend);
    if (h.bytes != recv.bytes) {
      if (rendezvous && !p.dead) {
        FrameHeader reply = header(Kind::kClearToSend, Tag{h.tag_context, h.tag_op}, recv.bytes, h.id);
        reply.status = 1;
        p.connections[0].out.push_back(OutFrame{reply, {}, nullptr, 0});
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
    const uint64_t id = next_transfer_id_++;
    p.incoming[id] = Incoming{recv.request, static_cast<std::byte*>(recv.data), recv.bytes};
    FrameHeader reply = header(Kind::kClearToSend, Tag{h.tag_context, h.tag_op}, recv.bytes, h.id);
    reply.aux = id;
    p.connections[0].out.push_back(OutFrame{reply, {}, nullptr, 0});
  }

  // A complete eager or request-to-send frame: match it, or keep it for the receive to come.
  void arrived(int peer, const FrameHeader& h, std::vector<std::byte> eager) {
    auto to = [&](const FrameHeader& m, const std::byte* payload, PostedRecv& r) { deliver(peer, m, payload, r); };
    peers_[peer].matcher.arrive(h, std::move(eager), to);
  }

  void cleared(int peer, const FrameHeader& h) {
    Peer& p = peers_[peer];
    auto it = p.awaiting_clear.find(h.id);
    if (it == p.awaiting_clear.end()) return;  // a cancelled send
    PendingSend send = it->second;
    p.awaiting_clear.erase(it);
    if (h.status != 0) {
      send.request->fail(size_mismatch_message(rank_, send.bytes, peer, h.bytes), false);
      return;
    }
    // Striping: one piece per connection (at least kMinStripeBytes each), starting where the last
    // striped send stopped so small large-messages spread over the connections too.
    const size_t n = p.connections.size();
    size_t piece = (send.bytes + n - 1) / n;
    piece = std::max(kMinStripeBytes, (piece + 4095) / 4096 * 4096);
    const size_t pieces = (send.bytes + piece - 1) / piece;
    auto transfer = std::make_shared<OutTransfer>(OutTransfer{send.request, send.data, pieces});
    for (size_t i = 0; i < pieces; ++i) {
      FrameHeader d = header(Kind::kData, Tag{h.tag_context, h.tag_op}, std::min(piece, send.bytes - i * piece), h.aux);
      d.aux = i * piece;
      p.connections[p.next_connection].out.push_back(OutFrame{d, {}, transfer, 0});
      p.next_connection = (p.next_connection + 1) % n;
    }
  }

  // Fails everything pending with `peer` and closes its connections; later requests fail at once.
  void fail_peer(int peer, const std::string& why, bool lost) {
    Peer& p = peers_[peer];
    if (p.dead) return;
    p.dead = true;
    p.lost = lost;
    p.reason = why;
    p.matcher.fail_all(why, lost);
    for (auto& [id, s] : p.awaiting_clear) s.request->fail(why, lost);
    p.awaiting_clear.clear();
    for (auto& [id, in] : p.incoming) {
      if (in.data) in.request->fail(why, lost);
    }
    p.incoming.clear();
    for (Connection& c : p.connections) {
      for (OutFrame& f : c.out) {
        if (f.transfer && f.transfer->data && f.transfer->request->pending()) f.transfer->request->fail(why, lost);
      }
      c.out.clear();
      boost::system::error_code ignored;
      if (c.socket) c.socket->close(ignored);
    }
  }

  void protocol_error(int peer, size_t c, const std::string& what) {
    fail_peer(peer,
              "malformed frame from rank " + std::to_string(peer) + " on connection " + std::to_string(c) + ": " +
                  what + " (a corrupted stream, or not an fsdp peer of this version)",
              false);
  }

  // Checks a complete header and decides where its payload goes. False after a protocol error.
  bool begin_frame(int peer, size_t c) {
    Reader& r = peers_[peer].connections[c].reader;
    const FrameHeader& h = r.header;
    if (h.magic != kFrameMagic) {
      protocol_error(peer, c, "bad magic " + hex(h.magic));
      return false;
    }
    const bool control = h.kind == static_cast<uint16_t>(Kind::kEager) ||
                         h.kind == static_cast<uint16_t>(Kind::kRequestToSend) ||
                         h.kind == static_cast<uint16_t>(Kind::kClearToSend);
    if (control && c != 0) {
      protocol_error(peer, c, "control frame of kind " + std::to_string(h.kind) + " off connection 0");
      return false;
    }
    switch (static_cast<Kind>(h.kind)) {
      case Kind::kEager:
        if (h.bytes > kTcpEagerBytes) {
          protocol_error(
              peer, c,
              "eager frame of " + std::to_string(h.bytes) + " bytes (limit " + std::to_string(kTcpEagerBytes) + ")");
          return false;
        }
        r.staging.resize(h.bytes);
        return true;
      case Kind::kRequestToSend:
      case Kind::kClearToSend:
        if (h.bytes > kMaxMessageBytes) {
          protocol_error(peer, c, "message of " + std::to_string(h.bytes) + " bytes");
          return false;
        }
        return true;
      case Kind::kData: {
        auto it = peers_[peer].incoming.find(h.id);
        if (it == peers_[peer].incoming.end()) {
          protocol_error(peer, c, "data for unknown transfer " + std::to_string(h.id));
          return false;
        }
        if (h.aux > it->second.bytes || h.bytes > it->second.bytes - h.aux) {
          protocol_error(peer, c,
                         "data piece [" + std::to_string(h.aux) + ", +" + std::to_string(h.bytes) + ") outside the " +
                             std::to_string(it->second.bytes) + "-byte message");
          return false;
        }
        return true;
      }
    }
    protocol_error(peer, c, "unknown frame kind " + std::to_string(h.kind));
    return false;
  }

  size_t payload_bytes(const FrameHeader& h) const {
    const auto kind = static_cast<Kind>(h.kind);
    return kind == Kind::kEager || kind == Kind::kData ? h.bytes : 0;
  }

  // Acts on a frame whose payload (if any) has fully arrived.
  void end_frame(int peer, size_t c) {
    Peer& p = peers_[peer];
    Reader& r = p.connections[c].reader;
    const FrameHeader h = r.header;
    r.header_got = 0;
    r.payload_got = 0;
    switch (static_cast<Kind>(h.kind)) {
      case Kind::kEager:
        arrived(peer, h, std::move(r.staging));
        r.staging = {};
        break;
      case Kind::kRequestToSend:
        arrived(peer, h, {});
        break;
      case Kind::kClearToSend:
        cleared(peer, h);
        break;
      case Kind::kData: {
        auto it = p.incoming.find(h.id);
        Incoming& in = it->second;
        in.received += h.bytes;
        if (in.received == in.bytes) {
          if (in.data) in.request->complete();
          p.incoming.erase(it);
        }
        break;
      }
    }
  }

  // Reads what connection c of `peer` has, frame by frame, straight into posted buffers.
  bool read(int peer, size_t c) {
    Peer& p = peers_[peer];
    Connection& conn = p.connections[c];
    Reader& r = conn.reader;
    bool moved = false;
    for (int round = 0; round < 16; ++round) {
      std::byte* dst;
      size_t want;
      if (r.header_got < sizeof(FrameHeader)) {
        dst = reinterpret_cast<std::byte*>(&r.header) + r.header_got;
        want = sizeof(FrameHeader) - r.header_got;
      } else {
        want = payload_bytes(r.header) - r.payload_got;
        if (static_cast<Kind>(r.header.kind) == Kind::kEager) {
          dst = r.staging.data() + r.payload_got;
        } else {
          Incoming& in = p.incoming.find(r.header.id)->second;
          if (in.data) {
            dst = in.data + r.header.aux + r.payload_got;
          } else {
            dst = discard_.data();
            want = std::min(want, discard_.size());
          }
        }
      }
      const ssize_t n = ::recv(conn.fd(), dst, want, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        fail_peer(peer,
                  "connection " + std::to_string(c) + " to rank " + std::to_string(peer) +
                      (n == 0 ? std::string(" was closed") : " failed: " + errno_text(errno)) +
                      " (the process exited or the network dropped it)",
                  true);
        return true;
      }
      moved = true;
      if (r.header_got < sizeof(FrameHeader)) {
        r.header_got += static_cast<size_t>(n);
        if (r.header_got < sizeof(FrameHeader)) continue;
        if (!begin_frame(peer, c)) return true;
      } else {
        r.payload_got += static_cast<size_t>(n);
      }
      if (r.payload_got == payload_bytes(r.header)) {
        end_frame(peer, c);
        if (p.dead) return true;
      }
    }
    return moved;
  }

  // Writes queued frames of connection c until the socket would block.
  bool write(int peer, size_t c) {
    Connection& conn = peers_[peer].connections[c];
    bool moved = false;
    while (!conn.out.empty()) {
      OutFrame& f = conn.out.front();
      const FrameHeader& h = f.header;
      const size_t payload = payload_bytes(h);
      iovec iov[2];
      int count = 0;
      if (f.sent < sizeof(FrameHeader)) {
        iov[count++] = {reinterpret_cast<std::byte*>(&f.header) + f.sent, sizeof(FrameHeader) - f.sent};
      }
      const size_t done = f.sent > sizeof(FrameHeader) ? f.sent - sizeof(FrameHeader) : 0;
      if (payload > done) {
        if (!f.transfer) {
          iov[count++] = {f.owned.data() + done, payload - done};
        } else if (f.transfer->data) {
          iov[count++] = {const_cast<std::byte*>(f.transfer->data) + h.aux + done, payload - done};
        } else {
          // Cancelled mid-piece: the receiver still counts the piece's bytes, so zeros finish it.
          static const std::array<std::byte, 64 * 1024> kZeros{};
          iov[count++] = {const_cast<std::byte*>(kZeros.data()), std::min(payload - done, kZeros.size())};
        }
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      const ssize_t n = ::sendmsg(conn.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {
        fail_peer(peer,
                  "connection " + std::to_string(c) + " to rank " + std::to_string(peer) +
                      " failed: " + errno_text(errno) + " (the process exited or the network dropped it)",
                  true);
        return true;
      }
      moved = true;
      f.sent += static_cast<size_t>(n);
      if (f.sent < sizeof(FrameHeader) + payload) continue;
      if (f.transfer && f.transfer->data && --f.transfer->pieces_left == 0) f.transfer->request->complete();
      conn.out.pop_front();
    }
    return moved;
  }

  // ---- connection set-up ----

  void configure(tcp::socket& s) {
    s.set_option(tcp::no_delay(true));
    if (options_.socket_buffer_bytes > 0) {
      s.set_option(asio::socket_base::send_buffer_size(options_.socket_buffer_bytes));
      s.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes));
    }
    s.non_blocking(true);
  }

  TcpHello hello_to(int peer, int connection) const {
    return TcpHello{kTcpHelloMagic, kTcpVersion, rank_, peer, size_, connection, options_.connections_per_peer};
  }

  // Empty when `h` is a valid handshake of this job; otherwise why not.
  std::string check_hello(const TcpHello& h, bool accepted) const {
    if (h.magic != kTcpHelloMagic) {
      return "opened with " + hex(h.magic) + " instead of the fsdp tcp handshake (not an fsdp rank? a port scanner?)";
    }
    if (h.version != kTcpVersion) {
      return "speaks protocol version " + std::to_string(h.version) + ", this rank " + std::to_string(kTcpVersion);
    }
    if (h.size != size_) {
      return "is rank " + std::to_string(h.from_rank) + " of a job of " + std::to_string(h.size) + " ranks, not " +
             std::to_string(size_) + " (two jobs share addresses, or stale addresses?)";
    }
    if (h.to_rank != rank_) {
      return "addressed rank " + std::to_string(h.to_rank) + ", but this is rank " + std::to_string(rank_) +
             " (stale or shuffled address list?)";
    }
    if (h.from_rank < 0 || h.from_rank >= size_ || (accepted && h.from_rank >= rank_)) {
      return "claims rank " + std::to_string(h.from_rank) + ", but only ranks below " + std::to_string(rank_) +
             " connect to rank " + std::to_string(rank_);
    }
    if (h.connections != options_.connections_per_peer || h.connection < 0 || h.connection >= h.connections) {
      return "uses connection " + std::to_string(h.connection) + " of " + std::to_string(h.connections) +
             " per peer, this rank " + std::to_string(options_.connections_per_peer) +
             " (TcpOptions::connections_per_peer must agree)";
    }
    return {};
  }

  // One connection this rank opens to a higher rank, retried with backoff until it passed the handshake.
  struct Dial {
    int peer;
    int index;
    tcp::endpoint target;
    std::unique_ptr<tcp::socket> socket;
    enum class State { kIdle, kConnecting, kHello, kReply, kDone } state = State::kIdle;
    Clock::time_point next_try{};
    std::chrono::milliseconds backoff{5};
    TcpHello hello;
    TcpHello reply{};
    size_t done = 0;  // bytes of the hello sent, then of the reply received
    std::string last_error;
  };
  // A connection a lower rank opened to us, until its handshake is read and answered.
  struct Accepted {
    std::unique_ptr<tcp::socket> socket;
    std::string from;
    TcpHello hello;
    size_t got = 0;
    size_t sent = 0;
  };

  static std::byte* bytes_of(TcpHello& h) { return reinterpret_cast<std::byte*>(&h); }

  void retry(Dial& d, const std::string& why) {
    boost::system::error_code ignored;
    d.socket->close(ignored);
    d.socket.reset();
    d.state = Dial::State::kIdle;
    d.done = 0;
    d.last_error = why;
    d.next_try = Clock::now() + d.backoff;
    d.backoff = std::min(d.backoff * 2, std::chrono::milliseconds(500));
  }

  void step(Dial& d, const ErrorContext& ctx) {
    boost::system::error_code ec;
    if (d.state == Dial::State::kIdle) {
      if (Clock::now() < d.next_try) return;
      d.socket = std::make_unique<tcp::socket>(io_);
      d.socket->open(d.target.protocol(), ec);
      if (ec) throw CommError(ctx, "cannot open a socket: " + ec.message());
      configure(*d.socket);  // before connecting, so the window scale matches the buffer
      d.socket->connect(d.target, ec);
      if (ec == asio::error::in_progress || ec == asio::error::would_block) {
        d.state = Dial::State::kConnecting;
      } else if (ec) {
        return retry(d, ec.message());
      } else {
        d.state = Dial::State::kHello;
      }
    }
    if (d.state == Dial::State::kConnecting) {
      pollfd pfd{d.socket->native_handle(), POLLOUT, 0};
      if (::poll(&pfd, 1, 0) <= 0) return;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(pfd.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return retry(d, std::strerror(err));
      d.state = Dial::State::kHello;
    }
    if (d.state == Dial::State::kHello) {
      const ssize_t n = ::send(d.socket->native_handle(), bytes_of(d.hello) + d.done, sizeof(TcpHello) - d.done,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) retry(d, std::strerror(errno));
        return;
      }
      d.done += static_cast<size_t>(n);
      if (d.done < sizeof(TcpHello)) return;
      d.done = 0;
      d.state = Dial::State::kReply;
    }
    if (d.state == Dial::State::kReply) {
      TcpHello& reply = d.reply;
      const ssize_t n =
          ::recv(d.socket->native_handle(), bytes_of(reply) + d.done, sizeof(TcpHello) - d.done, MSG_DONTWAIT);
      if (n == 0) return retry(d, "connected, but the peer closed the connection during the handshake");
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) retry(d, std::strerror(errno));
        return;
      }
      d.done += static_cast<size_t>(n);
      if (d.done < sizeof(TcpHello)) return;
      // The reply comes from the peer: it must name us and itself.
      std::string why = check_hello(reply, false);
      if (why.empty() && reply.from_rank != d.peer) why = "answered as rank " + std::to_string(reply.from_rank);
      if (why.empty() && reply.connection != d.index)
        why = "answered for connection " + std::to_string(reply.connection);
      if (!why.empty()) {
        ErrorContext c = ctx;
        c.peer = d.peer;
        throw CommError(c, "the listener of rank " + std::to_string(d.peer) + " at " + endpoint_text(d.target) +
                               " rejected the handshake: it " + why);
      }
      peers_[d.peer].connections[d.index].socket = std::move(d.socket);
      d.state = Dial::State::kDone;
    }
  }

  // Returns true once the handshake is answered and the connection is in place.
  bool step(Accepted& a, const ErrorContext& ctx) {
    const int fd = a.socket->native_handle();
    if (a.got < sizeof(TcpHello)) {
      const ssize_t n = ::recv(fd, bytes_of(a.hello) + a.got, sizeof(TcpHello) - a.got, MSG_DONTWAIT);
      if (n == 0) {
        if (a.got == 0) return true;  // a probe that connected and left: nothing to answer
        throw CommError(ctx, "connection from " + a.from + " closed after " + std::to_string(a.got) +
                                 " bytes of the handshake (not an fsdp rank?)");
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        return true;  // reset by the other side: it will retry
      }
      a.got += static_cast<size_t>(n);
      if (a.got < sizeof(TcpHello)) return false;
      const std::string why = check_hello(a.hello, true);
      if (!why.empty()) throw CommError(ctx, "bad handshake: the connection from " + a.from + " " + why);
      auto& slot = peers_[a.hello.from_rank].connections[a.hello.connection].socket;
      if (slot) {
        throw CommError(ctx, "bad handshake: rank " + std::to_string(a.hello.from_rank) + " opened connection " +
                                 std::to_string(a.hello.connection) + " twice (two processes claim that rank?)");
      }
      a.hello = hello_to(a.hello.from_rank, a.hello.connection);
    }
    const ssize_t n = ::send(fd, bytes_of(a.hello) + a.sent, sizeof(TcpHello) - a.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      return true;
    }
    a.sent += static_cast<size_t>(n);
    if (a.sent < sizeof(TcpHello)) return false;
    peers_[a.hello.to_rank].connections[a.hello.connection].socket = std::move(a.socket);
    return true;
  }

  void connect_all(TcpListener listener, const std::vector<TcpEndpoint>& peers, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    ErrorContext ctx{rank_, -1, "tcp_connect", 0, 0};
    if (!listener.valid()) throw InvalidArgument("tcp transport: rank " + std::to_string(rank_) + " got no listener");
    const TcpEndpoint own = listener.endpoint();
    const int listen_fd = listener.release();
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &addr_len);
    tcp::acceptor acceptor(io_);
    acceptor.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), listen_fd);
    acceptor.non_blocking(true);
    if (options_.socket_buffer_bytes > 0) {
      // Accepted sockets inherit these, and the window scale is fixed by the SYN exchange.
      acceptor.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes));
    }

    std::list<Dial> dials;
    for (int peer = rank_ + 1; peer < size_; ++peer) {
      const tcp::endpoint target = resolve(io_, peers[peer], ErrorContext{rank_, peer, "tcp_connect", 0, 0});
      for (int i = 0; i < options_.connections_per_peer; ++i) {
        Dial& d = dials.emplace_back();
        d.peer = peer;
        d.index = i;
        d.target = target;
        d.hello = hello_to(peer, i);
      }
    }
    std::list<Accepted> accepted;
    auto complete = [&] {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        for (const Connection& c : peers_[peer].connections) {
          if (!c.socket) return false;
        }
      }
      return true;
    };
    while (!complete()) {
      if (Clock::now() > deadline) {
        std::string missing, details;
        for (int peer = 0; peer < size_; ++peer) {
          if (peer == rank_) continue;
          bool up = true;
          for (const Connection& c : peers_[peer].connections) up &= c.socket != nullptr;
          if (up) continue;
          missing += " " + std::to_string(peer);
          for (const Dial& d : dials) {
            if (d.peer == peer && d.state != Dial::State::kDone) {
              details += "; rank " + std::to_string(peer) + " at " + endpoint_text(d.target) + ": " +
                         (d.state == Dial::State::kReply ? std::string("connected, no handshake answer")
                          : d.last_error.empty()         ? std::string("no connection")
                                                         : d.last_error);
              break;
            }
          }
        }
        throw TimeoutError(ctx, "ranks" + missing + " never connected to rank " + std::to_string(rank_) + " (" +
                                    own.to_string() + ") within " + std::to_string(timeout.count()) + " ms" + details);
      }
      for (;;) {
        boost::system::error_code ec;
        auto s = std::make_unique<tcp::socket>(io_);
        acceptor.accept(*s, ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) break;
        if (ec) throw CommError(ctx, "accept on " + own.to_string() + " failed: " + ec.message());
        configure(*s);
        boost::system::error_code ignored;
        const std::string from = endpoint_text(s->remote_endpoint(ignored));
        accepted.push_back(Accepted{std::move(s), from, {}, 0, 0});
      }
      for (Dial& d : dials) {
        if (d.state != Dial::State::kDone) step(d, ctx);
      }
      std::erase_if(accepted, [&](Accepted& a) { return step(a, ctx); });
      ::poll(nullptr, 0, 1);  // start-up only: a millisecond's nap keeps the other ranks' cores free
    }
    // From here on the listener is not needed: a rank that connects late gets refused, not ignored.
  }

  int rank_;
  int size_;
  TcpOptions options_;
  asio::io_context io_;  // before peers_: the sockets need it while they close
  std::vector<Peer> peers_;
  LoopbackMatcher self_;
  uint64_t next_send_id_ = 1;
  uint64_t next_transfer_id_ = 1;
  std::vector<pollfd> pollfds_;
  std::vector<std::pair<int, size_t>> poll_index_;
  std::array<std::byte, 64 * 1024> discard_{};  // where pieces of cancelled receives go
};

}  // namespace

std::string TcpEndpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

TcpEndpoint TcpEndpoint::parse(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw InvalidArgument("tcp endpoint '" + text + "' is not host:port");
  }
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long value = std::strtoul(port.c_str(), &end, 10);
  if (*end != '\0' || value > 65535 || host.empty()) {
    throw InvalidArgument("tcp endpoint '" + text + "' is not host:port (port 0..65535)");
  }
  return TcpEndpoint{host, static_cast<uint16_t>(value)};
}

TcpListener TcpListener::bind(const std::string& host, uint16_t port) {
  ErrorContext ctx{-1, -1, "tcp_listen", 0, 0};
  asio::io_context io;
  const tcp::endpoint where = resolve(io, TcpEndpoint{host, port}, ctx);
  tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(where.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(where, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw CommError(ctx, "cannot listen on " + TcpEndpoint{host, port}.to_string() + ": " + ec.message());
  const uint16_t chosen = acceptor.local_endpoint().port();
  // A plain descriptor from here on, so the listener survives fork() and joins the transport's own
  // io_context later.
  return TcpListener(acceptor.release(), TcpEndpoint{host, chosen});
}

TcpListener::TcpListener(TcpListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), endpoint_(std::move(other.endpoint_)) {}

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    endpoint_ = std::move(other.endpoint_);
  }
  return *this;
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

int TcpListener::release() { return std::exchange(fd_, -1); }

std::shared_ptr<Transport> make_tcp_transport(int rank, int size, TcpListener listener,
                                              const std::vector<TcpEndpoint>& peers,
                                              std::chrono::milliseconds connect_timeout, TcpOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("tcp transport: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  if (static_cast<int>(peers.size()) != size) {
    throw InvalidArgument("tcp transport: " + std::to_string(peers.size()) + " peer addresses for " +
                          std::to_string(size) + " ranks");
  }
  if (options.connections_per_peer < 1 || options.connections_per_peer > kTcpMaxConnectionsPerPeer) {
    throw InvalidArgument("tcp transport: connections_per_peer " + std::to_string(options.connections_per_peer) +
                          " outside [1, " + std::to_string(kTcpMaxConnectionsPerPeer) + "]");
  }
  if (options.socket_buffer_bytes < 0) throw InvalidArgument("tcp transport: negative socket_buffer_bytes");
  return std::make_shared<TcpTransport>(rank, size, std::move(listener), peers, connect_timeout, options);
}

}  // namespace fsdp
