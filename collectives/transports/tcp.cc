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
#include <cstring>
#include <deque>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

#include "collectives/core/errors.h"
#include "collectives/transports/fabric.h"
#include "collectives/transports/fabric_transport.h"
#include "collectives/transports/tcp_handshake.h"
#include "common/job_secret.h"
#include "common/knobs.h"
#include "common/rate_limited_log.h"

// TCP is a Fabric (fabric.h): what is here is only what is TCP. Sockets, the connection set-up and
// its handshake, framing of a byte stream, striping of data over a pair's connections and
// poll()-driven non-blocking progress. The message protocol (eager / request-to-send /
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
    for (Peer& p : peers_) p.connections.resize(options_.connections_per_peer);
    connect_all(std::move(listener), peers, timeout);
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

  // ---- connection set-up ----

  void configure(tcp::socket& s) {
    s.set_option(tcp::no_delay(true));
    if (options_.socket_buffer_bytes > 0) {
      s.set_option(asio::socket_base::send_buffer_size(options_.socket_buffer_bytes));
      s.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes));
    }
    s.non_blocking(true);
  }

  // Ours, with a fresh nonce; proof zero (the acceptor fills it in its reply).
  TcpHello hello_to(int peer, int connection) const {
    return make_rank_hello(kTcpHelloMagic, kTcpVersion, rank_, peer, size_, connection, options_.connections_per_peer,
                           random_bytes(kAuthNonceBytes));
  }

  // Empty when `h` is a handshake of this transport's version; otherwise why not. Checked before
  // authentication: what fails here is refused, not an error of the job.
  static std::string check_wire(const TcpHello& h) { return check_tcp_wire(h); }

  // Empty when `h`, from a peer that proved the job secret, describes this job; otherwise why not.
  std::string check_hello(const TcpHello& h, bool accepted) const {
    return check_rank_hello(h, rank_, size_, options_.connections_per_peer, accepted);
  }

  std::string secret_hint() const { return secret_mismatch_hint(!options_.secret.empty()); }

  // One connection this rank opens to a higher rank, retried with backoff until it passed the handshake.
  struct Dial {
    int peer;
    int index;
    tcp::endpoint target;
    std::unique_ptr<tcp::socket> socket;
    enum class State { kIdle, kConnecting, kHello, kReply, kProof, kDone } state = State::kIdle;
    Clock::time_point next_try{};
    std::chrono::milliseconds backoff{5};
    TcpHello hello;
    TcpHello reply{};
    Digest proof{};   // ours, answering the reply's challenge
    size_t done = 0;  // bytes of the hello sent, then of the reply received, then of the proof sent
    std::string last_error;
  };
  // A connection a lower rank (or anyone) opened to us, until it proved the secret or was refused.
  struct Accepted {
    std::unique_ptr<tcp::socket> socket;
    std::string from;
    TcpHello hello{};  // the dialer's
    TcpHello reply{};  // ours: our nonce and proof
    Digest proof{};    // the dialer's answer
    std::string transcript;  // what both proofs cover, once the hello is in
    size_t got = 0, sent = 0, proof_got = 0;
  };

  static std::byte* bytes_of(TcpHello& h) { return reinterpret_cast<std::byte*>(&h); }

  void retry(Dial& d, const std::string& why) {
    boost::system::error_code ignored;
    d.socket->close(ignored);
    d.socket.reset();
    d.state = Dial::State::kIdle;
    d.done = 0;
    d.hello = hello_to(d.peer, d.index);  // a fresh nonce: no reply recorded earlier fits the next try
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
      ErrorContext c = ctx;
      c.peer = d.peer;
      const std::string where = "the listener of rank " + std::to_string(d.peer) + " at " + endpoint_text(d.target);
      std::string why = check_wire(reply);
      if (!why.empty()) throw CommError(c, where + " rejected the handshake: it " + why);
      // The listener proves the secret first: a stranger squatting on the address is refused before
      // this rank proves anything to it.
      const std::string transcript = hello_transcript(d.hello, reply);
      Digest theirs;
      std::memcpy(theirs.data(), reply.proof, theirs.size());
      if (!equal_constant_time(theirs, auth_proof(options_.secret, kTcpAcceptLabel, transcript))) {
        throw CommError(c, where + " could not prove the job secret: " + secret_hint() +
                               " (or something else listens there)");
      }
      // The reply comes from the peer: it must name us and itself.
      why = check_hello(reply, false);
      if (why.empty() && reply.from_rank != d.peer) why = "answered as rank " + std::to_string(reply.from_rank);
      if (why.empty() && reply.connection != d.index)
        why = "answered for connection " + std::to_string(reply.connection);
      if (!why.empty()) throw CommError(c, where + " rejected the handshake: it " + why);
      d.proof = auth_proof(options_.secret, kTcpDialLabel, transcript);
      d.done = 0;
      d.state = Dial::State::kProof;
    }
    if (d.state == Dial::State::kProof) {
      const ssize_t n = ::send(d.socket->native_handle(), d.proof.data() + d.done, d.proof.size() - d.done,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) retry(d, std::strerror(errno));
        return;
      }
      d.done += static_cast<size_t>(n);
      if (d.done < d.proof.size()) return;
      peers_[d.peer].connections[d.index].socket = std::move(d.socket);
      d.state = Dial::State::kDone;
    }
  }

  // Drops a connection that did not prove the job secret: logged (rate-limited), remembered for the
  // timeout message, closed when `a` goes. Returns true (the connection is finished with).
  bool refuse(const Accepted& a, const std::string& why) {
    ++refused_;
    last_refusal_ = "from " + a.from + ": " + why;
    refusals_log_.line("fsdp tcp rank " + std::to_string(rank_) + ": ", "refused connection " + last_refusal_);
    return true;
  }

  // Returns true once the connection is in place or was refused.
  bool step(Accepted& a, const ErrorContext& ctx) {
    const int fd = a.socket->native_handle();
    if (a.got < sizeof(TcpHello)) {
      const ssize_t n = ::recv(fd, bytes_of(a.hello) + a.got, sizeof(TcpHello) - a.got, MSG_DONTWAIT);
      if (n == 0) {
        if (a.got == 0) return true;  // a probe that connected and left: nothing to answer
        return refuse(a, "closed after " + std::to_string(a.got) + " bytes of the handshake (not an fsdp rank?)");
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        return true;  // reset by the other side: it will retry
      }
      a.got += static_cast<size_t>(n);
      if (a.got < sizeof(TcpHello)) return false;
      if (const std::string why = check_wire(a.hello); !why.empty()) return refuse(a, why);
      a.reply = hello_to(a.hello.from_rank, a.hello.connection);
      a.transcript = hello_transcript(a.hello, a.reply);
      const Digest proof = auth_proof(options_.secret, kTcpAcceptLabel, a.transcript);
      std::memcpy(a.reply.proof, proof.data(), proof.size());
    }
    if (a.sent < sizeof(TcpHello)) {
      const ssize_t n =
          ::send(fd, bytes_of(a.reply) + a.sent, sizeof(TcpHello) - a.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        return true;
      }
      a.sent += static_cast<size_t>(n);
      if (a.sent < sizeof(TcpHello)) return false;
    }
    const ssize_t n = ::recv(fd, a.proof.data() + a.proof_got, a.proof.size() - a.proof_got, MSG_DONTWAIT);
    if (n == 0) return refuse(a, "claimed rank " + std::to_string(a.hello.from_rank) +
                                     " but closed the connection before proving the job secret");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      return true;
    }
    a.proof_got += static_cast<size_t>(n);
    if (a.proof_got < a.proof.size()) return false;
    if (!equal_constant_time(a.proof, auth_proof(options_.secret, kTcpDialLabel, a.transcript))) {
      return refuse(a, "claimed rank " + std::to_string(a.hello.from_rank) +
                           " with a wrong proof of the job secret (a forged or replayed hello, or " + secret_hint() +
                           ")");
    }
    // Authenticated: a disagreement now is a misconfigured job, not a stranger.
    const std::string why = check_hello(a.hello, true);
    if (!why.empty()) throw CommError(ctx, "bad handshake: the connection from " + a.from + " " + why);
    auto& slot = peers_[a.hello.from_rank].connections[a.hello.connection].socket;
    if (slot) {
      throw CommError(ctx, "bad handshake: rank " + std::to_string(a.hello.from_rank) + " opened connection " +
                               std::to_string(a.hello.connection) + " twice (two processes claim that rank?)");
    }
    slot = std::move(a.socket);
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
    const size_t max_pending = 64 + 2 * static_cast<size_t>(size_) * options_.connections_per_peer;
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
        if (refused_ > 0) {
          details += "; refused " + std::to_string(refused_) + " connection" + (refused_ == 1 ? "" : "s") +
                     " that did not prove the job secret, the last " + last_refusal_;
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
        // A flood of connections that never finish the handshake: the oldest pending one goes, so
        // memory stays bounded; a real rank whose connection went that way redials.
        if (accepted.size() >= max_pending) {
          refuse(accepted.front(), "still had not proved the job secret when " + std::to_string(max_pending) +
                                       " connections were pending");
          accepted.pop_front();
        }
        accepted.push_back(Accepted{std::move(s), from});
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
  std::deque<std::pair<int, std::vector<std::byte>>> inbox_;  // control messages, in arrival order
  std::vector<TcpOpPtr> settled_;                             // outcomes progress() reports next
  std::vector<FabricFailure> failed_;
  std::vector<pollfd> pollfds_;
  std::vector<std::pair<int, size_t>> poll_index_;
  std::array<std::byte, 64 * 1024> discard_{};  // where pieces of withdrawn receives go
  // Connections refused at start-up for not proving the job secret.
  RateLimitedLog refusals_log_;
  size_t refused_ = 0;
  std::string last_refusal_;
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
