#include "launch/torch_store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "collectives/types/errors.h"

namespace fsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kValidationMagic = 0x3C85F7CE;  // torch's validationMagicNumber
constexpr int kValidate = 0;                       // the validated dialect's first command
constexpr int kSet = 0, kCompareSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kWait = 5, kNumKeys = 6,
              kDelete = 8;  // legacy codes
constexpr uint8_t kStopWaiting = 0;
constexpr uint8_t kReady = 0, kNotReady = 1;  // CHECK's answers (torch's CheckResponseType)
// How long a legacy server may take to answer the probe. It answers from memory at once; a validated
// libuv server says nothing at all, so this is what joining a torch >= 2.4 agent's store costs.
constexpr milliseconds kProbeWindow{1500};

enum class Read { kOk, kClosed, kTimeout };

const ErrorContext kCtx{-1, -1, "torch store", 0, 0};

// One TCP connection, or -1; never blocks past `deadline` (a host that drops SYNs would hold a plain
// connect() for minutes).
int connect_once(const std::string& host, uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return -1;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!ok && errno == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{fd, POLLOUT, 0};
      int error = 0;
      socklen_t len = sizeof(error);
      ok = ::poll(&pfd, 1, static_cast<int>(std::clamp<long long>(left, 1, 60000))) == 1 &&
           ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
    }
    if (!ok) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // blocking sends; reads poll first
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Read recv_exact(int fd, void* out, size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(out);
  size_t done = 0;
  while (done < size) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Read::kTimeout;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) return Read::kClosed;
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd, p + done, size - done, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return Read::kClosed;
    done += static_cast<size_t>(n);
  }
  return Read::kOk;
}

// A byte string as torch sends it (u64 length, bytes); false when it did not come whole in time.
bool recv_bytes(int fd, std::string* value, Clock::time_point deadline) {
  uint64_t size = 0;
  if (recv_exact(fd, &size, sizeof(size), deadline) != Read::kOk || size >= (uint64_t{1} << 32)) return false;
  value->resize(size);
  return size == 0 || recv_exact(fd, value->data(), size, deadline) == Read::kOk;
}

template <typename T>
void append_value(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));  // little-endian hosts, as torch assumes
}

void append_string(std::string& out, const std::string& s) {
  append_value<uint64_t>(out, s.size());
  out += s;
}

// GETNUMKEYS on a fresh connection in `code`'s numbering: true when 8 bytes come back in time.
bool answers_num_keys(int fd, int code, milliseconds window) {
  int64_t count = 0;
  return send_all(fd, std::string(1, static_cast<char>(code))) &&
         recv_exact(fd, &count, sizeof(count), Clock::now() + window) == Read::kOk;
}

}  // namespace

std::string from_torch_compare_set(std::string reply, const std::string& expected, const std::string& desired) {
  if (!expected.empty() && expected != desired && reply == expected) return {};
  return reply;
}

TorchStoreClient::TorchStoreClient(std::string host, uint16_t port, milliseconds timeout, std::string key_namespace)
    : host_(std::move(host)), port_(port), timeout_(timeout), namespace_(std::move(key_namespace)) {
  const auto deadline = Clock::now() + timeout_;
  int fd = -1;
  for (milliseconds backoff{10}; (fd = connect_once(host_, port_, deadline)) < 0;
       backoff = std::min(backoff * 2, milliseconds(1000))) {
    if (Clock::now() > deadline) {
      throw TimeoutError(kCtx, "cannot connect to torch's store at " + host_ + ":" + std::to_string(port_) +
                                   " within " + std::to_string(timeout_.count()) +
                                   " ms (is torchrun's agent running?)");
    }
    std::this_thread::sleep_for(backoff);
  }
  if (answers_num_keys(fd, kNumKeys, std::min(kProbeWindow, timeout_))) {
    fd_ = fd;
    dialect_ = Dialect::kLegacy;
    return;
  }
  ::close(fd);
  dialect_ = Dialect::kValidated;
  connect_or_throw();
  if (!answers_num_keys(fd_, kNumKeys + 1, timeout_)) {
    drop_connection();
    throw CommError(kCtx, describe() + " answers neither dialect of torch's TCPStore protocol (torch <= 2.0 " +
                              "nor >= 2.1): is MASTER_ADDR:MASTER_PORT torchrun's store?");
  }
}

TorchStoreClient::~TorchStoreClient() { drop_connection(); }

std::string TorchStoreClient::describe() const {
  return "torch's store " + host_ + ":" + std::to_string(port_) +
         (dialect_ == Dialect::kLegacy ? " (torch <= 2.0 protocol)" : " (torch >= 2.1 protocol)");
}

void TorchStoreClient::drop_connection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TorchStoreClient::connect_or_throw() {
  if (fd_ >= 0) return;
  fd_ = connect_once(host_, port_, Clock::now() + timeout_);
  if (fd_ < 0) throw CommError(kCtx, "cannot reconnect to " + describe() + ": " + std::strerror(errno));
  if (dialect_ == Dialect::kValidated) {
    std::string hello(1, static_cast<char>(kValidate));
    append_value<uint32_t>(hello, kValidationMagic);
    if (!send_all(fd_, hello)) {
      drop_connection();
      throw CommError(kCtx, "the handshake with " + describe() + " failed");
    }
  }
}

void TorchStoreClient::send_command(int legacy_code, const std::string& body) {
  connect_or_throw();
  const int code = dialect_ == Dialect::kLegacy ? legacy_code : legacy_code + 1;
  if (!send_all(fd_, std::string(1, static_cast<char>(code)) + body)) {
    drop_connection();
    throw CommError(kCtx, "lost the connection to " + describe());
  }
}

void TorchStoreClient::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  std::string body;
  append_string(body, wire_key(key));
  append_string(body, value);
  send_command(kSet, body);
}

void TorchStoreClient::wait_locked(const std::vector<std::string>& keys, milliseconds timeout) {
  std::string body;
  append_value<uint64_t>(body, keys.size());
  for (const std::string& k : keys) append_string(body, wire_key(k));
  std::string names;
  for (const std::string& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  uint8_t answer = 0xff;
  if (timeout <= milliseconds(0)) {  // KeyValueStore's look: CHECK answers at once, present or not
    send_command(kCheck, body);
    if (recv_exact(fd_, &answer, 1, Clock::now() + timeout_) == Read::kOk) {
      if (answer == kReady) return;
      if (answer == kNotReady) throw TimeoutError(kCtx, names + " not yet at " + describe());
    }
    drop_connection();
    throw CommError(kCtx, "no answer to a check of " + names + " from " + describe());
  }
  send_command(kWait, body);
  const Read r = recv_exact(fd_, &answer, 1, Clock::now() + timeout);
  if (r == Read::kOk && answer == kStopWaiting) return;
  // The server still holds the wait: closing the connection is what cancels it in every version.
  drop_connection();
  if (r == Read::kTimeout) {
    throw TimeoutError(
        kCtx, "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + names + " at " + describe());
  }
  throw CommError(kCtx, "lost the connection to " + describe() + " waiting for " + names);
}

void TorchStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TorchStoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mu_);
  wait_locked(keys, timeout);
}

std::string TorchStoreClient::get(const std::string& key) { return get(key, timeout_); }

std::string TorchStoreClient::get(const std::string& key, milliseconds timeout) {
  std::lock_guard lock(mu_);
  wait_locked({key}, timeout);  // GET of a missing key is an error on the server: wait first, as torch does
  std::string body;
  append_string(body, wire_key(key));
  send_command(kGet, body);
  std::string value;
  if (recv_bytes(fd_, &value, Clock::now() + timeout_)) return value;
  drop_connection();
  throw CommError(kCtx, "no value for '" + key + "' from " + describe());
}

int64_t TorchStoreClient::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mu_);
  std::string body;
  append_string(body, wire_key(key));
  append_value<int64_t>(body, delta);
  send_command(kAdd, body);
  int64_t value = 0;
  if (recv_exact(fd_, &value, sizeof(value), Clock::now() + timeout_) != Read::kOk) {
    drop_connection();
    throw CommError(kCtx, "no answer to add('" + key + "') from " + describe());
  }
  return value;
}

std::string TorchStoreClient::compare_set(const std::string& key, const std::string& expected,
                                          const std::string& desired) {
  std::lock_guard lock(mu_);
  std::string body;
  append_string(body, wire_key(key));
  append_string(body, expected);
  append_string(body, desired);
  send_command(kCompareSet, body);
  std::string value;
  if (recv_bytes(fd_, &value, Clock::now() + timeout_)) return from_torch_compare_set(value, expected, desired);
  drop_connection();
  throw CommError(kCtx, "no answer to compare_set('" + key + "') from " + describe());
}

bool TorchStoreClient::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  if (dialect_ != Dialect::kLegacy) return false;
  std::string body;
  append_string(body, wire_key(key));
  send_command(kDelete, body);
  int64_t deleted = 0;
  if (recv_exact(fd_, &deleted, sizeof(deleted), Clock::now() + timeout_) != Read::kOk) {
    drop_connection();
    throw CommError(kCtx, "no answer to delete('" + key + "') from " + describe());
  }
  return deleted == 1;
}

}  // namespace fsdp::launch
