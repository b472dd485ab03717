#include "collectives/transports/ucx.h"

#include <ucp/api/ucp.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>

#include "collectives/transports/fabric.h"
#include "collectives/transports/fabric_transport.h"
#include "collectives/transports/process_identity.h"
#include "collectives/transports/ucx_handshake.h"
#include "collectives/types/errors.h"

// Why the tag API (and not stream, RMA or active messages): our transport contract is "a message
// between two ranks, matched by tag, in send order", which is what ucp tag matching does, and a
// posted tag receive is where UCX's rendezvous lands data zero-copy (CMA on one host, RDMA get
// between hosts) into the user's buffer. Streams would need our own framing and a copy out of UCX's
// buffers; RMA would need a memory registration and an rkey exchange for every user buffer.
//
// The 64-bit UCX tag's layout and what an authenticated connection carries: ucx_handshake.h. A data
// receive matches the full 64 bits, a control probe only bit 63, so one probe takes control messages
// from every peer in arrival order, which UCX keeps per sending endpoint.

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr ucp_tag_t kFullMask = ~0ull;
constexpr ucp_tag_t kControlMask = kUcxDataBit | kUcxIdMask;  // one kind of control message, from any rank
// Closing endpoints at teardown flushes what the caller already counts as sent; a peer that is gone
// cannot acknowledge, so the flush is bounded.
constexpr auto kCloseWait = std::chrono::seconds(2);

struct UcxOp final : FabricOp {
  void* request = nullptr;  // UCX's, until it completes
  bool ucx_done = false;
  bool control_recv = false;  // a probed control message: next_control hands it over, no callback
  int peer = -1;
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};
  std::vector<std::byte> buffer;  // a control message, sent or received
};

class UcxFabric final : public Fabric {
 public:
  UcxFabric(int rank, int size, const AddressExchange& exchange, std::chrono::milliseconds timeout,
            const std::string& secret)
      : rank_(rank),
        size_(size),
        authenticated_(!secret.empty()),
        auth_(rank, size, secret),
        eps_(size, nullptr),
        processes_(size),
        ep_errors_(size),
        ep_args_(size) {
    if (size > kUcxMaxRanks) {
      throw InvalidArgument("ucx transport: at most " + std::to_string(kUcxMaxRanks) + " ranks");
    }
    init();
    try {
      connect(exchange);
      if (authenticated_) authenticate(timeout);
    } catch (...) {
      teardown();
      throw;
    }
  }

  ~UcxFabric() override { teardown(); }

  std::string_view name() const override { return "ucx"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t max_data_id() const override { return kUcxIdMask; }

  // Authenticated: the pair's session key in front of the message (ucx_handshake.h).
  FabricOpPtr send_control(int peer, std::vector<std::byte> message, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    if (authenticated_) {
      const Digest& key = auth_.to_peer(peer).key;
      message.insert(message.begin(), reinterpret_cast<const std::byte*>(key.data()),
                     reinterpret_cast<const std::byte*>(key.data()) + key.size());
    }
    op->buffer = std::move(message);
    post_send(op, op->buffer.data(), op->buffer.size(), ucx_control_tag(rank_, kUcxControlId));
    return op;
  }

  FabricOpPtr send_data(int peer, uint64_t id, const void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    post_send(op, data, bytes, ucx_data_tag(rank_, id ^ auth_.to_peer(peer).data_mask));
    return op;
  }

  FabricOpPtr recv_data(int peer, uint64_t id, void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, std::move(done));
    ucp_request_param_t param = recv_param(op.get());
    const ucp_tag_t tag = ucx_data_tag(peer, id ^ auth_.from_peer(peer).data_mask);
    track(op, ucp_tag_recv_nbx(worker_, data, bytes, tag, kFullMask, &param));
    return op;
  }

  bool progress() override {
    // Every control message from any peer (handshakes too, refused once started), in the order UCX
    // matched them.
    const bool moved = progress_with(0, kUcxDataBit, control_inbox_);
    return drop_unexpected_data() || moved;
  }

  bool next_control(int& from, std::vector<std::byte>& message) override {
    while (!control_inbox_.empty() && control_inbox_.front()->ucx_done) {
      auto op = std::move(control_inbox_.front());
      control_inbox_.pop_front();
      const int peer = op->peer;
      if (peer < 0 || peer >= size_ || peer == rank_) {
        auth_.refuse(
            peer, "not a peer of rank " + std::to_string(rank_) + " in a job of " + std::to_string(size_) + " ranks");
        continue;
      }
      if (op->status != UCS_OK && !ep_errors_[peer].empty()) continue;  // cut off with its peer
      const uint64_t id = op->info.sender_tag & kUcxIdMask;
      if (id != kUcxControlId) {
        auth_.refuse(peer, id != kUcxHandshakeId ? "a control message under unknown tag id " + std::to_string(id)
                           : authenticated_      ? "a handshake message after start-up (a replay?)"
                                                 : "a handshake message: " + secret_mismatch_hint(false));
        continue;
      }
      message = std::move(op->buffer);
      message.resize(op->status == UCS_OK ? std::min(op->info.length, message.size()) : 0);  // broken: empty
      if (authenticated_ && !strip_session_key(peer, op->status, message)) continue;
      from = peer;
      return true;
    }
    return false;
  }

  void cancel(const FabricOpPtr& op) override {
    auto* u = static_cast<UcxOp*>(op.get());
    if (!u->ucx_done && u->request) ucp_request_cancel(worker_, u->request);
  }

  std::string check_peer(int peer) override {
    if (!ep_errors_[peer].empty()) return ep_errors_[peer];
    return processes_[peer].gone(peer);
  }

  std::vector<FabricFailure> take_failed_peers() override { return std::exchange(failed_, {}); }

 private:
  struct EpArg {
    UcxFabric* self;
    int peer;
  };

  // Worker progress, then receives every unexpected control message whose tag matches (tag, mask)
  // into `inbox`, then runs the callbacks of what finished. True when anything happened.
  bool progress_with(ucp_tag_t tag, ucp_tag_t mask, std::deque<std::shared_ptr<UcxOp>>& inbox) {
    bool moved = false;
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) moved = true;
    for (;;) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message = ucp_tag_probe_nb(worker_, tag, mask, 1, &info);
      if (!message) break;
      moved = true;
      auto op = make_op(ucx_sender_of(info.sender_tag), nullptr);
      op->control_recv = true;
      op->info = info;  // ucp_tag_msg_recv_nbx reports no receive info when it completes at once
      // A larger one is not ours: receiving it truncated fails it, and the protocol rejects it.
      op->buffer = std::vector<std::byte>(std::min(info.length, max_control_bytes()));
      ucp_request_param_t param = recv_param(op.get());
      track(op, ucp_tag_msg_recv_nbx(worker_, op->buffer.data(), op->buffer.size(), message, &param));
      inbox.push_back(op);
    }
    while (!finished_.empty()) {
      moved = true;
      auto batch = std::exchange(finished_, {});
      for (auto& op : batch) report(*op);
    }
    return moved;
  }

  // Data only ever moves into a receive posted before its clear-to-send, so UCX matches it on arrival.
  // What it cannot match (a receive withdrawn meanwhile, or a stranger guessing data ids) would stay in
  // UCX's unexpected queue for good: receive it into nothing (truncated) and say so.
  bool drop_unexpected_data() {
    bool moved = false;
    for (;;) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message = ucp_tag_probe_nb(worker_, kUcxDataBit, kUcxDataBit, 1, &info);
      if (!message) return moved;
      moved = true;
      const int peer = ucx_sender_of(info.sender_tag);
      auth_.refuse(peer, "a data message of " + std::to_string(info.length) +
                             " bytes that no receive waits for (a withdrawn receive, or an injected message)");
      auto op = make_op(peer, nullptr);
      op->control_recv = true;  // nobody hands it over: completing frees it
      ucp_request_param_t param = recv_param(op.get());
      track(op, ucp_tag_msg_recv_nbx(worker_, nullptr, 0, message, &param));
    }
  }

  size_t max_control_bytes() const { return kFabricMaxControlBytes + (authenticated_ ? kUcxFrameKeyBytes : 0); }

  // Authenticated control messages start with the sender's session key: true (and `message` without
  // it) when it is `peer`'s; otherwise the message is refused.
  bool strip_session_key(int peer, ucs_status_t status, std::vector<std::byte>& message) {
    if (!auth_.authenticated(peer)) {  // only a fabric that failed to start gets here
      auth_.refuse(peer, "a control message before that rank proved the job secret");
      return false;
    }
    Digest key{};
    if (status != UCS_OK || message.size() < key.size()) {
      auth_.refuse(peer, std::string("a control message that did not arrive whole (") + ucs_status_string(status) +
                             ", " + std::to_string(message.size()) + " bytes)");
      return false;
    }
    std::memcpy(key.data(), message.data(), key.size());
    if (!equal_constant_time(key, auth_.from_peer(peer).key)) {
      auth_.refuse(peer,
                   "a control message without that rank's session key (not the process that proved the job "
                   "secret: an injected message)");
      return false;
    }
    message.erase(message.begin(), message.begin() + static_cast<std::ptrdiff_t>(key.size()));
    return true;
  }

  // Runs the handshake of ucx_handshake.h with every peer: messages on the handshake tag only, so the
  // protocol's control messages that early peers already send wait in UCX for progress(). Strangers'
  // messages are refused and the real peers still waited for, until `timeout`.
  void authenticate(std::chrono::milliseconds timeout) {
    for (auto& m : auth_.start()) send_handshake(m);
    std::deque<std::shared_ptr<UcxOp>> inbox;
    const auto deadline = Clock::now() + timeout;
    while (!auth_.done()) {
      bool moved = progress_with(ucx_control_tag(0, kUcxHandshakeId), kControlMask, inbox);
      while (!inbox.empty() && inbox.front()->ucx_done) {
        auto op = std::move(inbox.front());
        inbox.pop_front();
        const size_t got = std::min(op->info.length, op->buffer.size());
        if (op->status != UCS_OK) {
          auth_.refuse(op->peer,
                       std::string("a handshake message that did not arrive whole: ") + ucs_status_string(op->status));
          continue;
        }
        for (auto& m : auth_.receive(op->peer, op->buffer.data(), got)) send_handshake(m);
      }
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_ || auth_.authenticated(peer) || ep_errors_[peer].empty()) continue;
        throw CommError(ErrorContext{rank_, peer, "ucx_connect", 0, 0},
                        "rank " + std::to_string(peer) +
                            " failed during the job-secret handshake: " + ep_errors_[peer] + refusals());
      }
      if (auth_.done()) break;
      if (Clock::now() > deadline) {
        throw TimeoutError(ErrorContext{rank_, -1, "ucx_connect", 0, 0},
                           "ranks " + auth_.waiting_for() + " did not prove the job secret to rank " +
                               std::to_string(rank_) + " over ucx within " + std::to_string(timeout.count()) +
                               " ms (not started, a different FSDP_JOB_SECRET, or unreachable)" + refusals());
      }
      if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // "; refused 3 messages that did not prove the job secret, the last claiming rank 1: ...", or empty.
  std::string refusals() const {
    if (auth_.refused() == 0) return {};
    return "; refused " + std::to_string(auth_.refused()) + " message" + (auth_.refused() == 1 ? "" : "s") +
           " that did not prove the job secret, the last " + auth_.last_refusal();
  }

  void send_handshake(UcxHandshake::Message& m) {
    auto op = make_op(m.peer, nullptr);
    op->buffer = std::move(m.bytes);
    post_send(op, op->buffer.data(), op->buffer.size(), ucx_control_tag(rank_, kUcxHandshakeId));
  }

  [[noreturn]] void fail(const std::string& call, ucs_status_t status) const {
    throw CommError(ErrorContext{rank_, -1, "ucx_init", 0, 0},
                    call + " failed: " + ucs_status_string(status) + " (check UCX_TLS and the UCX installation)");
  }

  void init() {
    // Shared memory (posix, sysv) hides its peer-failure support unless asked, and UCX then refuses it
    // for endpoints that need it (UCP_ERR_HANDLING_MODE_PEER): "Destination is unreachable" under
    // UCX_TLS=sm. Ask, unless the user decided. These are transport-level settings, which
    // ucp_config_modify does not reach in UCX 1.13, hence the environment (setenv keeps a user's
    // value); only for transports UCX_TLS may select, since UCX warns about variables nothing read.
    const char* tls_env = std::getenv("UCX_TLS");
    const std::string tls = tls_env ? tls_env : "all";
    auto may_use = [&](const char* name) {
      return tls == "all" || tls[0] == '^' || tls.find(name) != std::string::npos ||
             tls.find("sm") != std::string::npos || tls.find("mm") != std::string::npos;
    };
    if (may_use("posix")) ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    if (may_use("sysv")) ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) fail("ucp_config_read", s);
    // Control messages (at most kFabricMaxControlBytes) go eager: the sender's completion must not wait
    // for the receiver to progress. Everything larger is a data transfer, for which rendezvous is
    // what we want. An explicit UCX_RNDV_THRESH wins.
    if (!std::getenv("UCX_RNDV_THRESH")) {
      ucp_config_modify(config, "RNDV_THRESH", std::to_string(kFabricMaxControlBytes + 1).c_str());
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG;
    params.estimated_num_eps = static_cast<size_t>(size_);
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) fail("ucp_init", s);
    ucp_worker_params_t worker_params{};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Created here, then driven by the progress engine's thread: one thread at a time.
    worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    s = ucp_worker_create(context_, &worker_params, &worker_);
    if (s != UCS_OK) {
      ucp_cleanup(context_);
      context_ = nullptr;
      fail("ucp_worker_create", s);
    }
  }

  void connect(const AddressExchange& exchange) {
    ucp_address_t* address = nullptr;
    size_t address_bytes = 0;
    ucs_status_t s = ucp_worker_get_address(worker_, &address, &address_bytes);
    if (s != UCS_OK) fail("ucp_worker_get_address", s);
    UcxPeerInfo info{kUcxInfoMagic, rank_, size_, ProcessIdentity::self(), address_bytes};
    std::vector<std::byte> blob(sizeof(info) + address_bytes);
    std::memcpy(blob.data(), &info, sizeof(info));
    std::memcpy(blob.data() + sizeof(info), address, address_bytes);
    ucp_worker_release_address(worker_, address);

    const std::vector<std::string> all = exchange(hex_encode(blob.data(), blob.size()));
    if (static_cast<int>(all.size()) != size_) {
      throw CommError(ErrorContext{rank_, -1, "ucx_connect", 0, 0}, "the address exchange returned " +
                                                                        std::to_string(all.size()) + " addresses for " +
                                                                        std::to_string(size_) + " ranks");
    }
    for (int peer = 0; peer < size_; ++peer) {
      const ErrorContext ctx{rank_, peer, "ucx_connect", 0, 0};
      std::vector<std::byte> theirs;
      try {
        theirs = hex_decode(all[peer]);
      } catch (const InvalidArgument& e) {
        throw CommError(ctx, std::string("the address published for rank ") + std::to_string(peer) +
                                 " is not a UCX transport address: " + e.what());
      }
      UcxPeerInfo peer_info{};
      if (theirs.size() >= sizeof(peer_info)) std::memcpy(&peer_info, theirs.data(), sizeof(peer_info));
      if (theirs.size() < sizeof(peer_info) || peer_info.magic != kUcxInfoMagic ||
          peer_info.address_bytes != theirs.size() - sizeof(peer_info)) {
        throw CommError(ctx, "the address published for rank " + std::to_string(peer) +
                                 " is not a UCX transport address (a stale key of another job or transport?)");
      }
      if (peer_info.rank != peer || peer_info.size != size_) {
        throw CommError(ctx, "the address published for rank " + std::to_string(peer) + " belongs to rank " +
                                 std::to_string(peer_info.rank) + " of a job of " + std::to_string(peer_info.size) +
                                 " ranks (a stale key of another job?)");
      }
      processes_[peer] = peer_info.process;
      if (peer == rank_) continue;  // self-sends never reach UCX
      ep_args_[peer] = EpArg{this, peer};
      ucp_ep_params_t ep_params{};
      ep_params.field_mask =
          UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep_params.address = reinterpret_cast<const ucp_address_t*>(theirs.data() + sizeof(peer_info));
      ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep_params.err_handler.cb = &UcxFabric::on_ep_error;
      ep_params.err_handler.arg = &ep_args_[peer];
      s = ucp_ep_create(worker_, &ep_params, &eps_[peer]);
      if (s != UCS_OK) {
        eps_[peer] = nullptr;
        throw CommError(ctx, std::string("ucp_ep_create to rank ") + std::to_string(peer) +
                                 " failed: " + ucs_status_string(s) +
                                 " (no UCX transport in UCX_TLS reaches it with peer-failure support)");
      }
    }
  }

  // Never aborts, never waits long: after a lost peer UCX still holds requests and protocol state for
  // it, and ucp_worker_destroy asserts (aborting the process) when endpoints with work left are
  // destroyed. So: withdraw our receives, force-close endpoints whose peer failed or exited (their
  // sends complete with an error), close the rest gracefully, progress until all of that finished,
  // and only then destroy the worker. Whatever is still in flight at the deadline stays with the
  // process's exit rather than taking the process down.
  void teardown() {
    if (!worker_) return;
    for (const auto& [request, op] : by_request_) ucp_request_cancel(worker_, request);
    std::vector<void*> closing;
    for (int peer = 0; peer < size_; ++peer) {
      if (!eps_[peer]) continue;
      const bool lost = !ep_errors_[peer].empty() || !processes_[peer].gone(peer).empty();
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = lost ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t r = ucp_ep_close_nbx(eps_[peer], &param);
      if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
      eps_[peer] = nullptr;
    }
    const auto deadline = std::chrono::steady_clock::now() + kCloseWait;
    while ((!closing.empty() || !by_request_.empty()) && std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_);
      std::erase_if(closing, [](void* r) {
        if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
        ucp_request_free(r);
        return true;
      });
    }
    if (closing.empty() && by_request_.empty()) {
      ucp_worker_destroy(worker_);
      ucp_cleanup(context_);
    }
    worker_ = nullptr;
    context_ = nullptr;
  }

  std::shared_ptr<UcxOp> make_op(int peer, FabricCallback done) {
    auto op = std::make_shared<UcxOp>();
    op->peer = peer;
    op->done = std::move(done);
    return op;
  }

  ucp_request_param_t recv_param(UcxOp* op) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
    param.cb.recv = &UcxFabric::on_recv;
    param.user_data = this;
    param.recv_info.tag_info = &op->info;
    pending_op_ = op;  // the callback finds the op through the request's user data
    return param;
  }

  void post_send(const std::shared_ptr<UcxOp>& op, const void* data, size_t bytes, ucp_tag_t tag) {
    if (!eps_[op->peer] || !ep_errors_[op->peer].empty()) {
      finish_now(op, UCS_ERR_CONNECTION_RESET);
      return;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxFabric::on_send;
    param.user_data = this;
    pending_op_ = op.get();
    track(op, ucp_tag_send_nbx(eps_[op->peer], data, bytes, tag, &param));
  }

  // Records what a post returned: in flight (a request), done at once (NULL) or failed.
  void track(const std::shared_ptr<UcxOp>& op, ucs_status_ptr_t r) {
    pending_op_ = nullptr;
    if (op->ucx_done) {  // its callback already ran inside the post
      if (!op->control_recv) finished_.push_back(op);
    } else if (r == nullptr) {
      finish_now(op, UCS_OK);
    } else if (UCS_PTR_IS_ERR(r)) {
      finish_now(op, UCS_PTR_STATUS(r));
    } else {
      op->request = r;
      by_request_[r] = op;
    }
  }

  void finish_now(const std::shared_ptr<UcxOp>& op, ucs_status_t status) {
    op->ucx_done = true;
    op->status = status;
    if (!op->control_recv) finished_.push_back(op);
  }

  // UCX callbacks: they only record; report() runs the fabric callbacks from progress().
  static void on_send(void* request, ucs_status_t status, void* user_data) {
    static_cast<UcxFabric*>(user_data)->completed(request, status);
  }
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    auto* self = static_cast<UcxFabric*>(user_data);
    auto it = self->by_request_.find(request);
    if (it != self->by_request_.end() && info) it->second->info = *info;
    self->completed(request, status);
  }
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<EpArg*>(arg);
    UcxFabric& self = *a->self;
    if (!self.ep_errors_[a->peer].empty()) return;
    self.ep_errors_[a->peer] = "UCX reports the endpoint to rank " + std::to_string(a->peer) +
                               " failed: " + ucs_status_string(status) +
                               " (the process exited or the network dropped it)";
    self.failed_.push_back(FabricFailure{a->peer, self.ep_errors_[a->peer], true});
  }

  void completed(void* request, ucs_status_t status) {
    auto it = by_request_.find(request);
    if (it == by_request_.end()) {
      // Completed inside the post, before track() saw the request: mark the op being posted.
      if (pending_op_) {
        pending_op_->ucx_done = true;
        pending_op_->status = status;
      }
      ucp_request_free(request);
      return;
    }
    std::shared_ptr<UcxOp> op = std::move(it->second);
    by_request_.erase(it);
    op->request = nullptr;
    op->ucx_done = true;
    op->status = status;
    ucp_request_free(request);
    if (!op->control_recv) finished_.push_back(std::move(op));
  }

  void report(UcxOp& op) {
    FabricResult r;
    r.ok = op.status == UCS_OK;
    r.bytes = op.info.length;
    if (!r.ok) {
      const bool ep_failed = !ep_errors_[op.peer].empty();
      r.peer_lost = ep_failed || op.status == UCS_ERR_CONNECTION_RESET || op.status == UCS_ERR_ENDPOINT_TIMEOUT ||
                    op.status == UCS_ERR_UNREACHABLE;
      r.error = ep_failed
                    ? ep_errors_[op.peer]
                    : "UCX operation with rank " + std::to_string(op.peer) + " failed: " + ucs_status_string(op.status);
    }
    op.finished = true;
    if (FabricCallback done = std::move(op.done)) done(r);
  }

  int rank_;
  int size_;
  bool authenticated_;  // the job has a secret: handshake, session keys, masked data ids
  UcxHandshake auth_;   // also the log of refused messages, with or without a secret
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<ProcessIdentity> processes_;
  std::vector<std::string> ep_errors_;  // why each peer's endpoint failed, once it did
  std::vector<EpArg> ep_args_;          // stable addresses for the error callbacks
  std::vector<FabricFailure> failed_;
  std::unordered_map<void*, std::shared_ptr<UcxOp>> by_request_;  // ops in flight, by UCX request
  std::vector<std::shared_ptr<UcxOp>> finished_;                  // done, callback not yet run
  std::deque<std::shared_ptr<UcxOp>> control_inbox_;              // probed control messages, in order
  UcxOp* pending_op_ = nullptr;                                   // the op a post is running for
};

}  // namespace

std::shared_ptr<Transport> make_ucx_transport(int rank, int size, const AddressExchange& exchange,
                                              std::chrono::milliseconds connect_timeout, UcxOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("ucx transport: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  if (!exchange) throw InvalidArgument("ucx transport: no address exchange");
  return make_fabric_transport(std::make_unique<UcxFabric>(rank, size, exchange, connect_timeout, options.secret),
                               connect_timeout);
}

}  // namespace fsdp
