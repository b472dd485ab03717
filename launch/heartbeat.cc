#include "launch/heartbeat.h"

#include <charconv>
#include <cstdio>

#include "collectives/transports/transport.h"
#include "collectives/types/errors.h"
#include "launch/store.h"

namespace fsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A value no key of ours holds: compare_set(key, kNever, kNever) reads a key without parking (a plain
// get parks while the key is missing) and without creating it; "" when missing.
constexpr const char* kNever = "\x01never";

std::string peek(StoreClient& store, const std::string& key) { return store.compare_set(key, kNever, kNever); }

int64_t parse_count(const std::string& text) {
  int64_t v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && ptr == text.data() + text.size() ? v : -1;
}

}  // namespace

Heartbeat::Heartbeat(std::string store_host, uint16_t store_port, std::string key_prefix, int rank, int size,
                     std::shared_ptr<Transport> transport, milliseconds timeout, int store_rank,
                     std::string secret)
    : host_(std::move(store_host)),
      port_(store_port),
      prefix_(std::move(key_prefix)),
      rank_(rank),
      size_(size),
      store_rank_(store_rank),
      transport_(std::move(transport)),
      timeout_(timeout),
      period_(std::max(milliseconds(10), timeout / 4)),
      secret_(std::move(secret)),
      watched_since_(Clock::now()),
      store_ok_at_(Clock::now()),
      thread_([this] { run(); }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::run() {
  // Every call bounded by one beat, so stopping never waits longer than that.
  StoreClientOptions options;
  options.connect_timeout = period_;
  options.timeout = period_;
  options.secret = secret_;
  options.rank = rank_;
  std::unique_ptr<StoreClient> store;
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      if (!store) store = std::make_unique<StoreClient>(host_, port_, options);
      beat(*store);
      store_ok_at_ = Clock::now();
    } catch (const std::exception& e) {
      // The store is gone or silent. Served by a rank: that rank froze or died with it.
      if (store_rank_ >= 0 && store_rank_ != rank_ && Clock::now() - store_ok_at_ > timeout_) {
        declare(store_rank_, "rank " + std::to_string(store_rank_) + ", which serves the store, stopped answering for " +
                                 std::to_string(timeout_.count()) + " ms (" + e.what() + ")");
      }
    }
    lock.lock();
    cv_.wait_for(lock, period_, [this] { return stop_; });
  }
}

void Heartbeat::beat(StoreClient& store) {
  store.add(prefix_ + "heartbeat/" + std::to_string(rank_), 1);

  // Someone already found a frozen rank: "<rank>\t<why>".
  const std::string report = peek(store, prefix_ + "frozen");
  if (!report.empty()) {
    const size_t tab = report.find('\t');
    const int64_t frozen = parse_count(report.substr(0, tab));
    if (frozen >= 0 && frozen < size_ && frozen != rank_) {
      declare(static_cast<int>(frozen), tab == std::string::npos ? report : report.substr(tab + 1));
    }
  }

  const int watched = (rank_ + 1) % size_;
  const int64_t count = parse_count(peek(store, prefix_ + "heartbeat/" + std::to_string(watched)));
  const auto now = Clock::now();
  if (count != watched_count_) {
    watched_count_ = count;
    watched_since_ = now;
    return;
  }
  if (now - watched_since_ <= timeout_) return;
  const std::string why = "rank " + std::to_string(watched) + " sent no heartbeat for " +
                          std::to_string(timeout_.count()) + " ms (frozen: stopped, or its host hung; seen by rank " +
                          std::to_string(rank_) + "; FSDP_HEARTBEAT_TIMEOUT_SEC)";
  store.compare_set(prefix_ + "frozen", "", std::to_string(watched) + "\t" + why);  // the first report wins
  declare(watched, why);
}

void Heartbeat::declare(int peer, const std::string& why) {
  transport_->declare_peer_lost(peer, why);
  transport_->note_failure(why);
  if (declared_) return;
  declared_ = true;
  std::fprintf(stderr, "fsdp: rank %d: rank %d is lost: %s\n", rank_, peer, why.c_str());
  std::fflush(stderr);
}

}  // namespace fsdp::launch
