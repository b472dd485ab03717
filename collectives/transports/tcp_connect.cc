#include "collectives/transports/tcp_connect.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <utility>

#include "collectives/transports/tcp_handshake.h"
#include "collectives/types/errors.h"
#include "common/job_secret.h"
#include "common/rate_limited_log.h"

// Why non-blocking state machines stepped in one loop rather than a thread or a blocking connect per
// peer: a rank both dials the higher ranks and accepts the lower ones, and any of them may start
// late, so every dial and every accepted connection must make progress while the others wait.

namespace fsdp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

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

// One rank's connection set-up: its dials to the higher ranks and the connections the lower ranks (or
// strangers) opened to it, each stepped until it passed the handshake or was refused.
class TcpConnector {
 public:
  TcpConnector(asio::io_context& io, int rank, int size, const TcpOptions& options)
      : rank_(rank), size_(size), options_(options), io_(io), sockets_(size) {
    for (auto& row : sockets_) row.resize(options_.connections_per_peer);
  }

  // Dials, accepts and steps every handshake until each pair's connections are in place (a row of
  // connections_per_peer sockets per peer, this rank's own row empty sockets) or `timeout` passed.
  TcpSockets connect_all(TcpListener listener, const std::vector<TcpEndpoint>& peers,
                         std::chrono::milliseconds timeout) {
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
        for (const auto& s : sockets_[peer]) {
          if (!s) return false;
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
          for (const auto& s : sockets_[peer]) up &= s != nullptr;
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
    return std::move(sockets_);
  }

 private:
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
    TcpHello hello{};        // the dialer's
    TcpHello reply{};        // ours: our nonce and proof
    Digest proof{};          // the dialer's answer
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
        throw CommError(
            c, where + " could not prove the job secret: " + secret_hint() + " (or something else listens there)");
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
      sockets_[d.peer][d.index] = std::move(d.socket);
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
      const ssize_t n = ::send(fd, bytes_of(a.reply) + a.sent, sizeof(TcpHello) - a.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        return true;
      }
      a.sent += static_cast<size_t>(n);
      if (a.sent < sizeof(TcpHello)) return false;
    }
    const ssize_t n = ::recv(fd, a.proof.data() + a.proof_got, a.proof.size() - a.proof_got, MSG_DONTWAIT);
    if (n == 0)
      return refuse(a, "claimed rank " + std::to_string(a.hello.from_rank) +
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
    auto& slot = sockets_[a.hello.from_rank][a.hello.connection];
    if (slot) {
      throw CommError(ctx, "bad handshake: rank " + std::to_string(a.hello.from_rank) + " opened connection " +
                               std::to_string(a.hello.connection) + " twice (two processes claim that rank?)");
    }
    slot = std::move(a.socket);
    return true;
  }

  int rank_;
  int size_;
  const TcpOptions& options_;
  asio::io_context& io_;
  TcpSockets sockets_;
  // Connections refused for not proving the job secret.
  RateLimitedLog refusals_log_;
  size_t refused_ = 0;
  std::string last_refusal_;
};

}  // namespace

TcpSockets connect_tcp_peers(asio::io_context& io, int rank, int size, TcpListener listener,
                             const std::vector<TcpEndpoint>& peers, std::chrono::milliseconds timeout,
                             const TcpOptions& options) {
  return TcpConnector(io, rank, size, options).connect_all(std::move(listener), peers, timeout);
}

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

}  // namespace fsdp
