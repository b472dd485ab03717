#include "launch/store_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/types/errors.h"
#include "common/job_secret.h"
#include "launch/store_frame.h"
#include "proto/store.pb.h"

// Why an io_context per call: the client is blocking by contract, and driving its own small
// io_context for each call is what gives every socket operation a deadline (Asio's synchronous calls
// have none).

namespace fsdp::launch {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using proto::StoreRequest;
using proto::StoreResponse;

constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};

// True when the server closed this connection (EOF, reset) while it sat unused: the next request
// must go over a fresh one. Never blocks.
bool hung_up(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;  // readable with nothing to read: EOF
}

}  // namespace

class StoreClient::Impl {
 public:
  Impl(std::string host, uint16_t port, StoreClientOptions options)
      : host_(std::move(host)), port_(port), where_(store_address(host_, port_)), options_(options) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect();
  }

  const StoreClientOptions& options() const { return options_; }
  void set_reconnect_deadline(Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mutex_);
    reconnect_deadline_ = deadline;
  }

  // Sends one request, returns its OK response; throws for everything else. `subject` names what the
  // request was about ("key 'rank3'") for the error message. `budget` bounds the round trip.
  StoreResponse call(const StoreRequest& request, Clock::duration budget, const std::string& subject) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The server closes connections idle past FSDP_STORE_IDLE_TIMEOUT_SEC (and the longest-idle one at
    // its connection limit): notice before sending, so the request goes over a fresh connection.
    if (connected_ && hung_up(socket_.native_handle())) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      connected_ = false;
    }
    if (!connected_) connect();
    const std::string frame = store_frame_of(request);
    const ErrorContext ctx{options_.rank, -1, store_op_name(request.op()), 0, frame.size()};
    const std::string what = "store at " + where_ + ", " + subject + ": ";
    const auto deadline = Clock::now() + budget;
    const auto budget_ms = std::chrono::duration_cast<std::chrono::milliseconds>(budget).count();

    auto fail = [&](const boost::system::error_code& ec, const char* stage) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      connected_ = false;
      if (ec == asio::error::timed_out) {
        throw TimeoutError(ctx, what + "no reply within " + std::to_string(budget_ms) + " ms while " + stage +
                                    " (StoreClientOptions::timeout)");
      }
      throw CommError(ctx, what + "connection failed while " + stage + ": " + ec.message());
    };

    boost::system::error_code ec = run_until(deadline, [&](auto done) {
      asio::async_write(socket_, asio::buffer(frame), [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    if (ec) fail(ec, "sending the request");
    StoreLengthPrefix prefix{};
    ec = run_until(deadline, [&](auto done) {
      asio::async_read(socket_, asio::buffer(prefix), [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    if (ec) fail(ec, "reading the reply");
    const uint32_t size = decode_store_length(prefix);
    if (const std::string why = check_store_frame_length(size, kStoreMaxReplyBytes); !why.empty()) {
      fail(asio::error::message_size, ("reading the reply: " + why).c_str());
    }
    std::string body(size, '\0');
    ec = run_until(deadline, [&](auto done) {
      asio::async_read(socket_, asio::buffer(body), [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    if (ec) fail(ec, "reading the reply");
    StoreResponse response;
    if (!response.ParseFromString(body)) fail(asio::error::invalid_argument, "parsing the reply");

    switch (response.status()) {
      case StoreResponse::STATUS_OK:
        return response;
      case StoreResponse::STATUS_TIMEOUT:
        throw TimeoutError(ctx, what + response.error());
      case StoreResponse::STATUS_INVALID_ARGUMENT:
        throw InvalidArgument(what + response.error());
      default:
        throw CommError(ctx, what + "unknown reply status " + std::to_string(response.status()));
    }
  }

 private:
  // Runs the asynchronous operation `start` launches (it calls the `done` it is given with the result)
  // until it finishes or `deadline` passes; on the deadline it closes the socket and returns timed_out.
  template <class Start>
  boost::system::error_code run_until(Clock::time_point deadline, Start start) {
    boost::system::error_code result;
    bool finished = false;
    start([&result, &finished](const boost::system::error_code& ec) {
      result = ec;
      finished = true;
    });
    io_.restart();
    io_.run_until(deadline);
    if (finished) return result;
    boost::system::error_code ignored;
    socket_.close(ignored);
    // The aborted operation's handler refers to `result`: let it run before this frame goes away.
    io_.restart();
    io_.run();
    return asio::error::timed_out;
  }

  // The client's side of the handshake (store.h). A wrong proof either way throws CommError at once:
  // no retry fixes two different secrets. Transport errors return for the caller's retry loop.
  boost::system::error_code authenticate(Clock::time_point deadline) {
    std::string challenge(kStoreAuthMagic.size() + kAuthNonceBytes, '\0');
    boost::system::error_code ec = run_until(deadline, [&](auto done) {
      asio::async_read(socket_, asio::buffer(challenge),
                       [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    if (ec) return ec;
    const ErrorContext ctx{options_.rank, -1, "store_connect", 0, 0};
    if (challenge.compare(0, kStoreAuthMagic.size(), kStoreAuthMagic) != 0) {
      throw CommError(ctx, "the server at " + where_ + " is not an fsdp store of this version (it opened with " + "0x" +
                               to_hex(challenge.substr(0, kStoreAuthMagic.size())) + ")");
    }
    const std::string server_nonce = challenge.substr(kStoreAuthMagic.size());
    const std::string nonce = random_bytes(kAuthNonceBytes);
    const std::string transcript = server_nonce + nonce;
    const Digest proof = auth_proof(options_.secret, kStoreClientLabel, transcript);
    const std::string message = nonce + std::string(reinterpret_cast<const char*>(proof.data()), proof.size());
    ec = run_until(deadline, [&](auto done) {
      asio::async_write(socket_, asio::buffer(message),
                        [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    if (ec) return ec;
    Digest answer;
    ec = run_until(deadline, [&](auto done) {
      asio::async_read(socket_, asio::buffer(answer), [done](const boost::system::error_code& e, size_t) { done(e); });
    });
    const char* hint = options_.secret.empty()
                           ? " (this client has no job secret: set FSDP_JOB_SECRET or FSDP_JOB_SECRET_FILE as the "
                             "job's other processes have it)"
                           : " (FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE differs from the store's, or the store runs "
                             "without one)";
    if (ec == asio::error::eof || ec == asio::error::connection_reset) {
      throw CommError(ctx, "the store at " + where_ + " refused this client's proof of the job secret" + hint);
    }
    if (ec) return ec;
    if (!equal_constant_time(answer, auth_proof(options_.secret, kStoreServerLabel, transcript))) {
      throw CommError(ctx, "the server at " + where_ + " could not prove the job secret" + hint);
    }
    return {};
  }

  // Retries with exponential backoff, since ranks may start before the server does.
  void connect() {
    const auto start = Clock::now();
    const auto deadline = std::min(start + options_.connect_timeout, reconnect_deadline_);
    auto backoff = kFirstBackoff;
    std::string last_error = "none";
    for (int attempt = 1;; ++attempt) {
      boost::system::error_code ec;
      tcp::resolver resolver(io_);
      const auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
      if (!ec) {
        socket_ = tcp::socket(io_);
        ec = run_until(deadline, [&](auto done) {
          asio::async_connect(socket_, endpoints,
                              [done](const boost::system::error_code& e, const tcp::endpoint&) { done(e); });
        });
        if (!ec) {
          boost::system::error_code ignored;
          socket_.set_option(tcp::no_delay(true), ignored);
          ec = authenticate(deadline);
          if (!ec) {
            connected_ = true;
            return;
          }
        }
      }
      last_error = ec.message();
      const auto now = Clock::now();
      if (now >= deadline) {
        throw TimeoutError(
            ErrorContext{options_.rank, -1, "store_connect", 0, 0},
            "could not connect to the store at " + where_ + " within " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - start).count()) +
                " ms (" + std::to_string(attempt) + " attempts, last error: " + last_error +
                "); is the server up and reachable? StoreClientOptions::connect_timeout sets the bound");
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  std::string host_;
  uint16_t port_;
  std::string where_;
  StoreClientOptions options_;
  std::mutex mutex_;  // one request in flight per connection
  asio::io_context io_;
  tcp::socket socket_{io_};
  bool connected_ = false;
  Clock::time_point reconnect_deadline_ = Clock::time_point::max();
};

namespace {

StoreRequest keyed_request(StoreRequest::Op op, const std::string& key) {
  StoreRequest request;
  request.set_op(op);
  request.add_keys(key);
  return request;
}

std::string key_subject(const std::string& key) { return "key '" + key + "'"; }

}  // namespace

StoreClient::StoreClient(std::string host, uint16_t port, StoreClientOptions options)
    : host_(std::move(host)), port_(port), impl_(std::make_unique<Impl>(host_, port_, options)) {}

StoreClient::~StoreClient() = default;

void StoreClient::set_reconnect_deadline(std::chrono::steady_clock::time_point deadline) {
  impl_->set_reconnect_deadline(deadline);
}

void StoreClient::set(const std::string& key, const std::string& value) {
  StoreRequest request = keyed_request(StoreRequest::OP_SET, key);
  request.set_value(value);
  impl_->call(request, impl_->options().timeout, key_subject(key));
}

std::string StoreClient::get(const std::string& key) { return get(key, impl_->options().timeout); }

std::string StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  StoreRequest request = keyed_request(StoreRequest::OP_GET, key);
  request.set_timeout_ms(timeout.count());
  return impl_->call(request, timeout + impl_->options().timeout, key_subject(key)).value();
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, impl_->options().timeout); }

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;  // nothing to wait for; not worth a round trip
  StoreRequest request;
  request.set_op(StoreRequest::OP_WAIT);
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  impl_->call(request, timeout + impl_->options().timeout, "waiting for " + quoted_keys(keys));
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  StoreRequest request = keyed_request(StoreRequest::OP_ADD, key);
  request.set_delta(delta);
  return impl_->call(request, impl_->options().timeout, key_subject(key)).number();
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  StoreRequest request = keyed_request(StoreRequest::OP_COMPARE_SET, key);
  request.set_expected(expected);
  request.set_desired(desired);
  return impl_->call(request, impl_->options().timeout, key_subject(key)).value();
}

std::string StoreClient::vote(const std::string& counter, const std::string& decision, int64_t target,
                              const std::string& value, const std::string& snapshot,
                              std::chrono::milliseconds timeout) {
  StoreRequest request;
  request.set_op(StoreRequest::OP_VOTE);
  request.add_keys(counter);
  request.add_keys(decision);
  if (!snapshot.empty()) request.add_keys(snapshot);
  request.set_delta(1);
  request.set_target(target);
  request.set_desired(value);
  request.set_timeout_ms(timeout.count());
  try {
    return impl_->call(request, timeout + impl_->options().timeout, key_subject(decision)).value();
  } catch (const InvalidArgument& e) {
    // What servers without the op, or without its snapshot key, answer (store_frame.cc's, then and now).
    const std::string why = e.what();
    if (why.find("unknown store op") == std::string::npos &&
        why.find("store_vote takes two keys") == std::string::npos) {
      throw;
    }
    return KeyValueStore::vote(counter, decision, target, value, snapshot, timeout);
  }
}

bool StoreClient::erase(const std::string& key) {
  return impl_->call(keyed_request(StoreRequest::OP_DELETE, key), impl_->options().timeout, key_subject(key))
             .number() != 0;
}

int64_t StoreClient::num_keys() {
  StoreRequest request;
  request.set_op(StoreRequest::OP_NUM_KEYS);
  return impl_->call(request, impl_->options().timeout, "num_keys").number();
}

}  // namespace fsdp::launch
