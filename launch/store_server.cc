#include "launch/store_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>

#include "collectives/types/errors.h"
#include "common/job_secret.h"
#include "common/knobs.h"
#include "common/rate_limited_log.h"
#include "launch/store_data.h"
#include "launch/store_frame.h"
#include "proto/store.pb.h"

// Why callbacks on one thread: the store's state (the map and the parked requests) is then touched
// by one thread only, so it needs no lock, and a parked WAIT costs a timer, not a thread.

namespace fsdp::launch {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using proto::StoreRequest;
using proto::StoreResponse;

// A parked request's timeout is clamped to this, so that a huge timeout_ms cannot overflow the
// timer's time_point.
constexpr std::chrono::milliseconds kMaxParkTime = std::chrono::hours(24 * 365);
// After a failed accept (out of descriptors): wait this long before trying again, not spin.
constexpr std::chrono::milliseconds kAcceptRetry{100};
// Descriptors the server leaves to the rest of its process when capping max_connections.
constexpr size_t kReservedDescriptors = 64;

// max_connections, but never more than the descriptors this process may open, less a reserve.
size_t connection_cap(size_t wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::max<size_t>(wanted, 1);
  const size_t room =
      limit.rlim_cur > kReservedDescriptors * 2 ? limit.rlim_cur - kReservedDescriptors : limit.rlim_cur / 2;
  return std::max<size_t>(std::min(wanted, room), 1);
}

std::chrono::milliseconds seconds_knob(const knobs::Knob<double>& knob) {
  return std::chrono::milliseconds(static_cast<long long>(std::min(knob.get(), 1e9) * 1000.0));
}

}  // namespace

StoreServerOptions StoreServerOptions::from_env() {
  StoreServerOptions o;
  o.max_connections = static_cast<size_t>(knobs::kStoreMaxConnections.get());
  o.idle_timeout = seconds_knob(knobs::kStoreIdleTimeoutSec);
  o.io_timeout = seconds_knob(knobs::kStoreIoTimeoutSec);
  o.secret = job_secret_from_env().key;
  return o;
}

// What a connection is doing, and what bounds it:
//   idle (waiting for a request's 4-byte length)   idle_timeout; the first evicted at the connection limit
//   reading the body                              io_timeout; memory grows with the bytes that arrived
//   parked (GET/WAIT for missing keys)            the request's own timeout; a hang-up is seen at once
//   writing the reply                             io_timeout

class StoreServer::Impl {
 public:
  Impl(const std::string& host, uint16_t port, StoreServerOptions options)
      : host_(host), options_(options), max_connections_(connection_cap(options.max_connections)) {
    const ErrorContext ctx{-1, -1, "store_listen", 0, 0};
    const std::string where = store_address(host, port);
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    const auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) throw CommError(ctx, "cannot resolve store address " + where + ": " + ec.message());
    const tcp::endpoint endpoint = results.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    // SO_REUSEADDR so a relaunched job can rebind the port its predecessor left in TIME_WAIT.
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw CommError(ctx, "store server cannot listen on " + where + ": " + ec.message() +
                               " (is the address local and the port free? port 0 lets the kernel pick one)");
    }
    port_ = acceptor_.local_endpoint().port();
    log_prefix_ = "fsdp store " + store_address(host_, port_) + ": ";
    accept();
    thread_ = std::thread([this] { serve(); });
  }

  ~Impl() {
    // Shut down on the server thread, which alone touches the state.
    asio::post(io_, [this] {
      stopping_ = true;
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      accept_retry_.cancel();
      const auto sessions = sessions_;  // close() erases from sessions_
      for (const SessionPtr& session : sessions) close(session, nullptr);
      io_.stop();
    });
    thread_.join();
  }

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  struct Session {
    explicit Session(asio::io_context& io) : socket(io), timer(io), deadline(io) {}
    tcp::socket socket;
    asio::steady_timer timer;          // the parked request's deadline
    asio::steady_timer deadline;       // the idle or I/O bound of what the connection does now
    uint64_t deadline_generation = 0;  // tells a stale deadline callback from the current one
    bool idle = false;                 // waiting for a request: the first to go at the connection limit
    Clock::time_point idle_since{};
    StoreLengthPrefix prefix{};
    uint32_t expected = 0;               // the body's announced length
    std::string body;                    // the request being read, as much as arrived
    std::string reply;                   // the frame being written; must live until the write completes
    std::optional<StoreRequest> parked;  // a GET or WAIT waiting for its keys
    std::string nonce;                   // the server's half of the handshake's challenge
    // Tells a timer callback that was already queued when its request got its keys (and so could not
    // be cancelled) that it belongs to an earlier park.
    uint64_t park_generation = 0;
    bool closed = false;
  };
  using SessionPtr = std::shared_ptr<Session>;

  void serve() {
    // A handler that throws (say, bad_alloc on a huge value) must not take the server down with it.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fsdp store %s: request handler failed: %s\n", store_address(host_, port_).c_str(),
                     e.what());
      }
    }
  }

  // One accept in flight at a time, and none while max_connections_ are held and none of them is idle
  // (back-pressure: the kernel's backlog holds the rest until close() makes room).
  void accept() {
    accepting_ = true;
    auto session = std::make_shared<Session>(io_);
    acceptor_.async_accept(session->socket, [this, session](const boost::system::error_code& ec) {
      accepting_ = false;
      if (stopping_ || ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (EMFILE), or a client that reset at once: free the longest-idle
        // connection and retry after a pause, rather than spin on an error that persists.
        log_.line(log_prefix_, "accepting a connection failed: " + ec.message() + " (" +
                                   std::to_string(sessions_.size()) + " connections held)");
        evict_idle(nullptr, "the server is out of descriptors");
        accept_retry_.expires_after(kAcceptRetry);
        accept_retry_.async_wait([this](const boost::system::error_code& e) {
          if (!e) resume_accept();
        });
        return;
      }
      boost::system::error_code ignored;
      session->socket.set_option(tcp::no_delay(true), ignored);
      sessions_.insert(session);
      authenticate(session);
      if (sessions_.size() >= max_connections_) {
        evict_idle(session, "the connection limit is reached (FSDP_STORE_MAX_CONNECTIONS)");
      }
      resume_accept();
    });
  }

  void resume_accept() {
    if (!accepting_ && !stopping_ && sessions_.size() < max_connections_) accept();
  }

  // Closes the connection idle longest (not `keep`) because of `cause`; false when none is idle.
  bool evict_idle(const SessionPtr& keep, const std::string& cause) {
    SessionPtr oldest;
    for (const SessionPtr& s : sessions_) {
      if (s != keep && s->idle && (!oldest || s->idle_since < oldest->idle_since)) oldest = s;
    }
    if (!oldest) return false;
    close(oldest, ("idle longest of " + std::to_string(sessions_.size()) + " connections and " + cause).c_str());
    return true;
  }

  // The connection's current bound: when it passes, the connection is closed (`why` logged, or not
  // when null). Re-arming or disarm() makes a pending callback stale.
  void arm(const SessionPtr& session, std::chrono::milliseconds after, const char* why) {
    const uint64_t generation = ++session->deadline_generation;
    session->deadline.expires_after(after);
    session->deadline.async_wait([this, session, generation, why](const boost::system::error_code& ec) {
      if (ec || session->closed || session->deadline_generation != generation) return;
      close(session, why);
    });
  }

  void disarm(const SessionPtr& session) {
    ++session->deadline_generation;
    session->deadline.cancel();
  }

  // The handshake (store.h): challenge, check the client's proof, answer with ours. Until it passed
  // the connection counts as idle (the first to go at the connection limit) and lives at most the
  // shorter of the two timeouts; nothing it sends is parsed as a request.
  void authenticate(const SessionPtr& session) {
    session->idle = true;
    session->idle_since = Clock::now();
    session->nonce = random_bytes(kAuthNonceBytes);
    session->reply = std::string(kStoreAuthMagic) + session->nonce;
    arm(session, std::min(options_.io_timeout, options_.idle_timeout),
        "sent no proof of the job secret in time (not an fsdp client of this version?)");
    asio::async_write(
        session->socket, asio::buffer(session->reply), [this, session](const boost::system::error_code& ec, size_t) {
          if (ec) return close(session, nullptr);
          session->body.assign(kAuthNonceBytes + sizeof(Digest), '\0');
          asio::async_read(
              session->socket, asio::buffer(session->body),
              [this, session](const boost::system::error_code& e, size_t) {
                if (e)
                  return close(session,
                               e == asio::error::eof ? "closed the connection before proving the job secret" : nullptr);
                const std::string client_nonce = session->body.substr(0, kAuthNonceBytes);
                const std::string transcript = session->nonce + client_nonce;
                Digest proof;
                std::memcpy(proof.data(), session->body.data() + kAuthNonceBytes, proof.size());
                if (!equal_constant_time(proof, auth_proof(options_.secret, kStoreClientLabel, transcript))) {
                  return close(session,
                               options_.secret.empty()
                                   ? "refused: its proof is not of the empty key this store runs with (the client "
                                     "holds a job secret, this store none)"
                                   : "refused: wrong proof of the job secret (a different FSDP_JOB_SECRET, none, or "
                                     "not a rank of this job)");
                }
                const Digest answer = auth_proof(options_.secret, kStoreServerLabel, transcript);
                session->reply.assign(reinterpret_cast<const char*>(answer.data()), answer.size());
                session->body = std::string();
                asio::async_write(session->socket, asio::buffer(session->reply),
                                  [this, session](const boost::system::error_code& w, size_t) {
                                    if (w) return close(session, nullptr);
                                    session->reply = std::string();
                                    read_request(session);
                                  });
              });
        });
  }

  void read_request(const SessionPtr& session) {
    session->idle = true;
    session->idle_since = Clock::now();
    arm(session, options_.idle_timeout, nullptr);  // an idle client is no offender: closed silently
    asio::async_read(
        session->socket, asio::buffer(session->prefix), [this, session](const boost::system::error_code& ec, size_t) {
          if (ec) return close(session, nullptr);  // includes a clean EOF: the client left
          session->idle = false;
          const uint32_t size = decode_store_length(session->prefix);
          if (const std::string why = check_store_frame_length(size, kStoreMaxFrameBytes); !why.empty()) {
            return close(session, why.c_str());
          }
          arm(session, options_.io_timeout, "the request's body did not arrive in time (FSDP_STORE_IO_TIMEOUT_SEC)");
          session->expected = size;
          session->body.clear();
          read_body(session);
        });
  }

  // Reads the body in pieces of 4 KiB doubling up to 64 KiB (store_body_read_size): the buffer holds
  // about what arrived, so a 4-byte prefix announcing 64 MiB costs 4 KiB until the bytes actually come.
  void read_body(const SessionPtr& session) {
    const size_t have = session->body.size();
    const size_t want = store_body_read_size(have, session->expected);
    if (want == 0) {
      disarm(session);
      StoreRequest request;
      if (!request.ParseFromString(session->body)) return close(session, "frame is not a StoreRequest");
      session->body = std::string();  // do not hold a big value's bytes
      return handle(session, std::move(request));
    }
    session->body.resize(have + want);
    session->socket.async_read_some(asio::buffer(session->body.data() + have, want),
                                    [this, session, have](const boost::system::error_code& ec, size_t n) {
                                      if (ec) return close(session, nullptr);
                                      session->body.resize(have + n);
                                      read_body(session);
                                    });
  }

  void respond(const SessionPtr& session, const StoreResponse& response) {
    session->reply = store_frame_of(response);
    arm(session, options_.io_timeout, "the client did not take its reply in time (FSDP_STORE_IO_TIMEOUT_SEC)");
    asio::async_write(session->socket, asio::buffer(session->reply),
                      [this, session](const boost::system::error_code& ec, size_t) {
                        if (ec) return close(session, nullptr);
                        session->reply = std::string();
                        read_request(session);
                      });
  }

  // `why` non-null: the client broke the protocol or a bound, worth a (rate-limited) line on stderr.
  // Idempotent. Frees the descriptor at once and lets a paused accept go on.
  void close(const SessionPtr& session, const char* why) {
    if (session->closed) return;
    session->closed = true;
    boost::system::error_code ec;
    if (why != nullptr) {
      const tcp::endpoint peer = session->socket.remote_endpoint(ec);
      log_.line(log_prefix_, "closing connection from " +
                                 (ec ? std::string("?") : store_address(peer.address().to_string(), peer.port())) +
                                 ": " + why);
    }
    session->socket.close(ec);
    session->timer.cancel();
    session->deadline.cancel();
    if (session->parked) {
      session->parked.reset();
      parked_.remove(session);
    }
    sessions_.erase(session);
    resume_accept();
  }

  // A parked client sends nothing until answered, so a readable socket means it hung up (EOF, reset)
  // or broke the protocol: either way the connection and its descriptor go now, not at the timeout.
  void watch_hangup(const SessionPtr& session, uint64_t generation) {
    session->socket.async_wait(
        tcp::socket::wait_read, [this, session, generation](const boost::system::error_code& ec) {
          if (ec || session->closed || !session->parked || session->park_generation != generation) return;
          boost::system::error_code ignored;
          const bool sent_more = session->socket.available(ignored) > 0;
          close(session, sent_more ? "sent a request while its previous one was parked" : nullptr);
        });
  }

  // Ends a park: the hang-up watch must not outlive it.
  void unpark(const SessionPtr& session) {
    session->parked.reset();
    boost::system::error_code ignored;
    session->socket.cancel(ignored);
  }

  // Every parsed request goes through StoreData::apply; only parking and waking are the server's.
  void handle(const SessionPtr& session, StoreRequest request) {
    StoreResponse response;
    const StoreData::Outcome outcome = data_.apply(request, &response);
    if (outcome.created) wake_parked();  // a VOTE may create its counter and still park
    if (outcome.park) return park(session, std::move(request));
    respond(session, response);
  }

  // The session sends nothing more until it is answered (one request in flight per connection), so
  // parking it is just not reading from it.
  void park(const SessionPtr& session, StoreRequest request) {
    const auto timeout =
        std::clamp(std::chrono::milliseconds(request.timeout_ms()), std::chrono::milliseconds(0), kMaxParkTime);
    session->parked = std::move(request);
    const uint64_t generation = ++session->park_generation;
    parked_.push_back(session);
    watch_hangup(session, generation);
    session->timer.expires_after(timeout);
    session->timer.async_wait([this, session, generation, timeout](const boost::system::error_code&) {
      if (session->closed || !session->parked || session->park_generation != generation) return;
      StoreResponse response;
      response.set_status(StoreResponse::STATUS_TIMEOUT);
      const std::vector<std::string> missing = data_.missing_keys(*session->parked);
      for (const std::string& key : missing) response.add_missing_keys(key);
      response.set_error("key" + std::string(missing.size() == 1 ? " " : "s ") + quoted_keys(missing) +
                         " still missing after " + std::to_string(timeout.count()) + " ms");
      unpark(session);
      parked_.remove(session);
      respond(session, response);
    });
  }

  // Called when a key was created: answers every parked request whose keys now all exist.
  void wake_parked() {
    for (auto it = parked_.begin(); it != parked_.end();) {
      const SessionPtr session = *it;
      if (!data_.missing_keys(*session->parked).empty()) {
        ++it;
        continue;
      }
      it = parked_.erase(it);
      StoreResponse response;
      data_.apply(*session->parked, &response);  // its keys are all there now: GET gets its value
      unpark(session);
      session->timer.cancel();
      respond(session, response);  // asynchronous: cannot re-enter this loop
    }
  }

  // io_ first: destroyed last, after everything that holds its sockets and timers.
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_{io_};
  std::string host_;
  uint16_t port_ = 0;
  const StoreServerOptions options_;
  const size_t max_connections_;
  bool accepting_ = false;
  RateLimitedLog log_;
  std::string log_prefix_;
  StoreData data_;
  std::unordered_set<SessionPtr> sessions_;
  std::list<SessionPtr> parked_;
  bool stopping_ = false;
  std::thread thread_;
};

StoreServer::StoreServer(const std::string& host, uint16_t port, StoreServerOptions options)
    : impl_(std::make_unique<Impl>(host, port, options)) {}
StoreServer::~StoreServer() = default;
const std::string& StoreServer::host() const { return impl_->host(); }
uint16_t StoreServer::port() const { return impl_->port(); }
std::string StoreServer::address() const { return store_address(impl_->host(), impl_->port()); }

}  // namespace fsdp::launch
