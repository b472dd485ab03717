#include "collectives/transports/tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>

#include "collectives/transports/fabric.h"
#include "collectives/transports/fabric_transport.h"
#include "collectives/transports/tcp_connect.h"
#include "collectives/transports/tcp_handshake.h"
#include "collectives/types/errors.h"
#include "common/knobs.h"

// TCP is a Fabric (fabric.h): what is here is only what is TCP. Framing of a byte stream, striping of
// data over a pair's connections and poll()-driven non-blocking progress over the sockets the
// connection set-up (tcp_connect.cc: the listener, the dial and accept handshakes) hands over. The
// message protocol (eager / request-to-send /
// clear-to-send, Tag matching, size checks, loopback, the start-up hello) is fabric_transport.cc's,
// shared with UCX and MPI.
//
// Why raw non-blocking sockets polled with ::poll and not Asio's completion handlers driven by
// io_context::poll(): the progress engine calls progress() in a tight loop, and one poll(2) with a
// zero timeout over every connection is the cheapest possible "anything to do?" (a single syscall,
// no handler allocation, no reactor queue). Data pieces then land straight in the posted receive
// buffer at the offset their header names, which a handler-per-read design would make awkward. Asio
// still does what it is good at: resolving names, opening, binding, listening, accepting, connecting
// and setting socket options; the data path uses the native handles.

namespace fsdp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Large payloads are striped across a pair's connections in pieces of at least this many bytes, so
// that a medium message does not pay a frame header and a syscall per few kilobytes.
constexpr size_t kMinStripeBytes = 256 * 1024;
// Data ids are 64-bit on the wire; the protocol never gets near this.
constexpr uint64_t kMaxDataId = 1ull << 63;

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// A posted operation. Data sends and receives work on the caller's buffer (`data`, null once
// withdrawn: a send's pieces are then finished with zeros, a receive's read and dropped, so the
// streams keep their framing).
struct TcpOp final : FabricOp {
  int peer = -1;
  bool settled = false;  // its outcome is queued for progress() to report
  FabricResult result;
  std::byte* data = nullptr;
  size_t bytes = 0;
  size_t pieces_left = 0;  // data sends: pieces not yet in the kernel
  size_t received = 0;     // data receives: bytes arrived so far
};
using TcpOpPtr = std::shared_ptr<TcpOp>;

// One frame on its way out: a control message as the protocol built it (header and eager payload),
// or a piece of a data send (its own header, then send->data + header.aux).
struct OutFrame {
  std::vector<std::byte> control;
  MessageHeader header{};
  TcpOpPtr send;
  size_t sent = 0;  // bytes of the frame written so far
};

// The frame being read from one connection.
struct Reader {
  MessageHeader header{};
  size_t header_got = 0;
  size_t payload_got = 0;
  std::vector<std::byte> control;  // a control message: its header, then its eager payload
};

struct Connection {
  std::unique_ptr<tcp::socket> socket;
  std::deque<OutFrame> out;
  Reader reader;
  int fd() const { return socket->native_handle(); }
};

struct Peer {
  std::vector<Connection> connections;
  std::unordered_map<uint64_t, TcpOpPtr> receiving;  // data receives, by data id
  size_t next_connection = 0;                        // where the next striped send starts
  bool dead = false;
  bool lost = false;  // a connection closed or failed (vs. a malformed frame)
  std::string reason;
};

class TcpFabric final : public Fabric {
 public:
  TcpFabric(int rank, int size, TcpListener listener, const std::vector<TcpEndpoint>& peers,
            std::chrono::milliseconds timeout, TcpOptions options)
      : rank_(rank), size_(size), options_(options), peers_(size) {
    TcpSockets sockets = connect_tcp_peers(io_, rank, size, std::move(listener), peers, timeout, options_);
    for (int peer = 0; peer < size_; ++peer) {
      for (auto& socket : sockets[peer]) peers_[peer].connections.push_back(Connection{std::move(socket), {}, {}});
    }
  }

  ~TcpFabric() override {
    // Eager sends completed when the fabric took them; give what still waits in user space a moment
    // to reach the kernel, which delivers it even after close. Data pieces belong to abandoned sends.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    for (Peer& p : peers_) {
      for (Connection& c : p.connections) {
        std::erase_if(c.out, [](const OutFrame& f) { return f.send && f.sent == 0; });
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
  uint64_t max_data_id() const override { return kMaxDataId; }

  // Control messages of a pair all travel on connection 0, so they arrive in send order. The message
  // is the fabric's from here on: the send is reported done at once, as its bytes need nothing more
  // from the caller.
  FabricOpPtr send_control(int peer, std::vector<std::byte> message, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    Peer& p = peers_[peer];
    if (p.dead) return settle(op, failure(p));
    Connection& conn = p.connections[0];
    const bool idle = conn.out.empty();
    conn.out.push_back(OutFrame{std::move(message), {}, nullptr, 0});
    settle(op, FabricResult{});
    // Hand it to the kernel now where the socket takes it: a rank that completes its last send and
    // exits (or dies) at once must not leave the message behind in user space.
    if (idle) write(peer, 0);
    return op;
  }

  bool next_control(int& from, std::vector<std::byte>& message) override {
    if (inbox_.empty()) return false;
    from = inbox_.front().first;
    message = std::move(inbox_.front().second);
    inbox_.pop_front();
    return true;
  }

  // Striping: one piece per connection (at least kMinStripeBytes each), starting where the last
  // striped send stopped, so that medium messages spread over the connections too.
  FabricOpPtr send_data(int peer, uint64_t id, const void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    Peer& p = peers_[peer];
    if (p.dead) return settle(op, failure(p));
    op->data = static_cast<std::byte*>(const_cast<void*>(data));
    op->bytes = bytes;
    if (bytes == 0) return settle(op, FabricResult{});
    const size_t n = p.connections.size();
    size_t piece = (bytes + n - 1) / n;
    piece = std::max(kMinStripeBytes, (piece + 4095) / 4096 * 4096);
    op->pieces_left = (bytes + piece - 1) / piece;
    for (size_t offset = 0; offset < bytes; offset += piece) {
      MessageHeader h = make_header(MessageKind::kData, Tag{}, std::min(piece, bytes - offset), id);
      h.aux = offset;
      p.connections[p.next_connection].out.push_back(OutFrame{{}, h, op, 0});
      p.next_connection = (p.next_connection + 1) % n;
    }
    return op;
  }

  // The pieces land straight in `data`, in whatever order the connections deliver them.
  FabricOpPtr recv_data(int peer, uint64_t id, void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    Peer& p = peers_[peer];
    if (p.dead) return settle(op, failure(p));
    op->data = static_cast<std::byte*>(data);
    op->bytes = bytes;
    if (bytes == 0) return settle(op, FabricResult{});
    p.receiving[id] = op;
    return op;
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
    bool moved = false;
    if (!pollfds_.empty() && ::poll(pollfds_.data(), pollfds_.size(), 0) > 0) {
      for (size_t i = 0; i < pollfds_.size(); ++i) {
        const short revents = pollfds_[i].revents;
        const auto [peer, c] = poll_index_[i];
        if (revents == 0 || peers_[peer].dead) continue;
        if (revents & (POLLIN | POLLERR | POLLHUP)) moved |= read(peer, c);
        if (!peers_[peer].dead && (revents & POLLOUT)) moved |= write(peer, c);
      }
    }
    // Outcomes are reported here only, never inside the call that posted the operation.
    while (!settled_.empty()) {
      moved = true;
      for (TcpOpPtr& op : std::exchange(settled_, {})) {
        op->finished = true;
        if (FabricCallback done = std::move(op->done)) done(op->result);
      }
    }
    return moved;
  }

  // A data send is withdrawn at once: pieces not yet started are dropped, a piece half in the kernel
  // is finished with zeros. A data receive is withdrawn at once too: what still arrives for it is
  // read and dropped. A control message is already the fabric's and goes out regardless.
  void cancel(const FabricOpPtr& fop) override {
    auto op = std::static_pointer_cast<TcpOp>(fop);
    if (op->settled) return;
    op->data = nullptr;
    for (Connection& c : peers_[op->peer].connections) {
      std::erase_if(c.out, [&](const OutFrame& f) { return f.send == op && f.sent == 0; });
    }
    FabricResult r;
    r.ok = false;
    r.error = "cancelled";
    settle(op, std::move(r));
  }

  std::string check_peer(int peer) override {
    const Peer& p = peers_[peer];
    return p.dead && p.lost ? p.reason : std::string();
  }

  std::vector<FabricFailure> take_failed_peers() override { return std::exchange(failed_, {}); }

  void drop_peer(int peer) override {
    fail_peer(peer, "rank " + std::to_string(rank_) + " dropped rank " + std::to_string(peer) + " after an error",
              false, false);
  }

 private:
  TcpOpPtr make_op(int peer, FabricCallback done) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      throw InvalidArgument("tcp fabric: peer " + std::to_string(peer) + " outside [0, " + std::to_string(size_) +
                            ") or this rank");
    }
    auto op = std::make_shared<TcpOp>();
    op->peer = peer;
    op->done = std::move(done);
    return op;
  }

  TcpOpPtr settle(const TcpOpPtr& op, FabricResult r) {
    if (op->settled) return op;
    op->settled = true;
    op->result = std::move(r);
    settled_.push_back(op);
    return op;
  }

  static FabricResult failure(const Peer& p) {
    FabricResult r;
    r.ok = false;
    r.peer_lost = p.lost;
    r.error = p.reason;
    return r;
  }

  // Fails every operation with `peer` and closes its connections; later ones fail at once. Reported
  // to the protocol through take_failed_peers() unless the protocol itself dropped the peer.
  void fail_peer(int peer, const std::string& why, bool lost, bool report = true) {
    Peer& p = peers_[peer];
    if (p.dead) return;
    p.dead = true;
    p.lost = lost;
    p.reason = why;
    if (report) failed_.push_back(FabricFailure{peer, why, lost});
    for (auto& [id, op] : std::exchange(p.receiving, {})) settle(op, failure(p));
    for (Connection& c : p.connections) {
      for (OutFrame& f : c.out) {
        if (f.send) settle(f.send, failure(p));
      }
      c.out.clear();
      boost::system::error_code ignored;
      if (c.socket) c.socket->close(ignored);
    }
  }

  void lost_connection(int peer, size_t c, const std::string& what) {
    fail_peer(peer,
              "connection " + std::to_string(c) + " to rank " + std::to_string(peer) + " " + what +
                  " (the process exited or the network dropped it)",
              true);
  }

  // Checks a complete header before anything is read for it. False after a malformed one: the
  // stream has lost its framing, so the peer is failed and its connections closed.
  bool begin_frame(int peer, size_t c) {
    Peer& p = peers_[peer];
    Reader& r = p.connections[c].reader;
    const MessageHeader& h = r.header;
    std::optional<uint64_t> transfer_bytes;
    if (h.is(MessageKind::kData)) {
      if (auto it = p.receiving.find(h.id); it != p.receiving.end()) transfer_bytes = it->second->bytes;
    }
    const std::string why = check_tcp_frame(h, c, transfer_bytes);
    if (!why.empty()) {
      fail_peer(peer, malformed_frame_message(peer, "tcp connection " + std::to_string(c), why), false);
      return false;
    }
    if (!h.is(MessageKind::kData)) {
      r.control.resize(sizeof(MessageHeader) + payload_bytes(h));
      std::memcpy(r.control.data(), &h, sizeof(MessageHeader));
    }
    return true;
  }

  // Acts on a frame whose payload (if any) has fully arrived.
  void end_frame(int peer, size_t c) {
    Peer& p = peers_[peer];
    Reader& r = p.connections[c].reader;
    r.header_got = 0;
    r.payload_got = 0;
    if (!r.header.is(MessageKind::kData)) {
      inbox_.emplace_back(peer, std::exchange(r.control, {}));
      return;
    }
    auto it = p.receiving.find(r.header.id);
    TcpOp& op = *it->second;
    op.received += r.header.bytes;
    if (op.received < op.bytes) return;
    FabricResult ok;
    ok.bytes = op.received;
    settle(it->second, std::move(ok));  // no-op for a withdrawn receive
    p.receiving.erase(it);
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
      if (r.header_got < sizeof(MessageHeader)) {
        dst = reinterpret_cast<std::byte*>(&r.header) + r.header_got;
        want = sizeof(MessageHeader) - r.header_got;
      } else if (r.header.is(MessageKind::kData)) {
        TcpOp& op = *p.receiving.find(r.header.id)->second;
        want = r.header.bytes - r.payload_got;
        if (op.data) {
          dst = op.data + r.header.aux + r.payload_got;
        } else {
          dst = discard_.data();
          want = std::min(want, discard_.size());
        }
      } else {
        dst = r.control.data() + sizeof(MessageHeader) + r.payload_got;
        want = r.header.bytes - r.payload_got;
      }
      const ssize_t n = ::recv(conn.fd(), dst, want, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        lost_connection(peer, c, n == 0 ? std::string("was closed") : "failed: " + errno_text(errno));
        return true;
      }
      moved = true;
      if (r.header_got < sizeof(MessageHeader)) {
        r.header_got += static_cast<size_t>(n);
        if (r.header_got < sizeof(MessageHeader)) continue;
        if (!begin_frame(peer, c)) return true;
      } else {
        r.payload_got += static_cast<size_t>(n);
      }
      if (r.payload_got == payload_bytes(r.header)) end_frame(peer, c);
    }
    return moved;
  }

  // Writes queued frames of connection c until the socket would block.
  bool write(int peer, size_t c) {
    Connection& conn = peers_[peer].connections[c];
    bool moved = false;
    while (!conn.out.empty()) {
      OutFrame& f = conn.out.front();
      iovec iov[2];
      int count = 0;
      size_t total;
      if (!f.send) {
        total = f.control.size();
        iov[count++] = {f.control.data() + f.sent, total - f.sent};
      } else {
        const size_t payload = f.header.bytes;
        total = sizeof(MessageHeader) + payload;
        if (f.sent < sizeof(MessageHeader)) {
          iov[count++] = {reinterpret_cast<std::byte*>(&f.header) + f.sent, sizeof(MessageHeader) - f.sent};
        }
        const size_t done = f.sent > sizeof(MessageHeader) ? f.sent - sizeof(MessageHeader) : 0;
        if (f.send->data) {
          iov[count++] = {f.send->data + f.header.aux + done, payload - done};
        } else {
          // Withdrawn mid-piece: the receiver still counts the piece's bytes, so zeros finish it.
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
        lost_connection(peer, c, "failed: " + errno_text(errno));
        return true;
      }
      moved = true;
      f.sent += static_cast<size_t>(n);
      if (f.sent < total) continue;
      if (f.send && f.send->data && --f.send->pieces_left == 0) settle(f.send, FabricResult{});
      conn.out.pop_front();
    }
    return moved;
  }

  int rank_;
  int size_;
  TcpOptions options_;
  asio::io_context io_;  // before peers_: the sockets need it while they close
  std::vector<Peer> peers_;
  std::deque<std::pair<int, std::vector<std::byte>>> inbox_;  // control messages, in arrival order
  std::vector<TcpOpPtr> settled_;                             // outcomes progress() reports next
  std::vector<FabricFailure> failed_;
  std::vector<pollfd> pollfds_;
  std::vector<std::pair<int, size_t>> poll_index_;
  std::array<std::byte, 64 * 1024> discard_{};  // where pieces of withdrawn receives go
};

}  // namespace

TcpOptions TcpOptions::from_env() {
  TcpOptions o;
  o.connections_per_peer = static_cast<int>(knobs::kTcpConnections.get());
  o.socket_buffer_bytes = static_cast<int>(knobs::kTcpSocketBufferBytes.get());
  o.secret = job_secret_from_env().key;
  return o;
}

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
  return make_fabric_transport(
      std::make_unique<TcpFabric>(rank, size, std::move(listener), peers, connect_timeout, options), connect_timeout);
}

}  // namespace fsdp
