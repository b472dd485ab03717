// The communicator's side of the flag path (collectives/flag_path.h): setting the segment up, and
// posting a collective there instead of giving it to the engine.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "collectives/communicator_impl.h"

namespace fsdp {

void Communicator::Impl::settle_flag_op() {
  if (!flag_pending) return;
  std::shared_ptr<FlagOp> pending = std::move(flag_pending);
  if (pending->settled()) return;
  try {
    pending->wait();
  } catch (const std::exception&) {
  }
}

std::optional<Work> Communicator::Impl::set_up_at_first_collective(Communicator& comm, const Fingerprint& call,
                                                                   size_t bytes) {
  if (flag_setup != FlagSetup::kUntried || group.endpoints.size() < 2) return std::nullopt;
  if (layout && layout->hosts() > 1) return std::nullopt;
  try {
    set_up_flags(comm, call);
    return std::nullopt;
  } catch (const CommError& e) {
    // The set-up's exchange failed (a peer never came, or died), or the ranks called different
    // collectives: this call fails with it, through its Work like any collective's error.
    auto failed = std::make_shared<FlagOp>();
    const bool mismatch = dynamic_cast<const MismatchError*>(&e) != nullptr;
    failed->fail_unposted(
        std::current_exception(),
        ErrorContext{transport->rank(), -1, std::string(name(static_cast<CollectiveKind>(call.op))), next_seq++, bytes},
        mismatch ? "" : "setting up the flag path (rank 0's segment, every rank's mapping) failed: ");
    return Work(std::move(failed));
  }
}

std::optional<Work> Communicator::Impl::flag_path(Communicator& comm, const CommOptions& o, size_t bytes,
                                                  const FlagOp::Call& call) {
  if (auto failed = set_up_at_first_collective(comm, call.fingerprint(0), call.post_bytes)) return failed;
  if (flag_setup != FlagSetup::kOn || bytes > std::min(o.flag_path_bytes, kFlagPayloadBytes)) return std::nullopt;
  if (layout && layout->hosts() > 1) return std::nullopt;
  settle_flag_op();
  std::shared_ptr<FlagOp>& pooled = flag_pool[flag_ops % 2];  // reused once no Work holds it
  if (!pooled || pooled.use_count() > 1) pooled = std::make_shared<FlagOp>();
  OpPtr prior = last_ordered && last_ordered->state() == Op::State::kPending ? last_ordered : nullptr;
  pooled->post(flags, call, next_seq++, flag_ops++ % 2, o.timeout, group.context, std::move(prior), engine);
  flag_pending = pooled;
  return Work(pooled);
}

void Communicator::Impl::set_up_flags(Communicator& comm, Fingerprint call) {
  flag_setup = FlagSetup::kOff;
  if (!transport->shares_host_memory() || !transport->separate_processes()) return;
  flag_setup = FlagSetup::kSettingUp;  // the exchanges below take the engine
  const int n = static_cast<int>(group.endpoints.size());
  const size_t bytes = FlagSegment::bytes_for(n);
  std::string error;
  int fd = -1;
  Mapping mapping;
  if (group.rank == 0) mapping = create_memfd("fsdp-flag-path", bytes, fd, error);
  // Every rank's call travels with rank 0's segment, so ranks that called different collectives or
  // counts here (one would take the path, one the engine) fail alike at once naming both calls,
  // whatever FSDP_CHECK_COLLECTIVES says. The call gets the number after the set-up's two.
  call.seq = next_seq + 2;
  struct Post {
    Fingerprint call;
    int64_t pid;
    int64_t fd;
  };
  std::vector<Post> posts(static_cast<size_t>(n));
  posts[static_cast<size_t>(group.rank)] = Post{call, ::getpid(), fd};
  int64_t mapped = 0;
  try {
    comm.all_gather(&posts[static_cast<size_t>(group.rank)], posts.data(), sizeof(Post), DataType::kUint8).wait();
    std::vector<Fingerprint> calls;
    for (const Post& p : posts) calls.push_back(p.call);
    std::string text;
    if (const int differs = first_mismatch(calls, text); differs >= 0) {
      transport->note_failure(text);
      engine->abort(stream, text);  // broken, as after any mismatch
      next_seq = call.seq;          // the failed call's number is the one its description gives
      const int other = calls[static_cast<size_t>(group.rank)] == calls[0] ? differs : 0;
      throw MismatchError(ErrorContext{transport->rank(), group.endpoints[static_cast<size_t>(other)],
                                       std::string(name(static_cast<CollectiveKind>(call.op))), call.seq, 0},
                          text);
    }
    if (group.rank != 0 && posts[0].fd >= 0)
      mapping = map_peer_memfd(static_cast<int>(posts[0].pid), static_cast<int>(posts[0].fd), bytes, error);
    mapped = mapping.data() ? 1 : 0;
    comm.all_reduce(&mapped, &mapped, 1, DataType::kInt64, ReduceOp{ReduceKind::kMin, 1.0}).wait();
  } catch (...) {
    if (fd >= 0) ::close(fd);
    flag_setup = FlagSetup::kOff;
    throw;
  }
  if (fd >= 0) ::close(fd);
  if (!mapped) {
    flag_setup = FlagSetup::kOff;  // the engine runs everything, as before
    return;
  }
  flags = std::make_shared<FlagSegment>(std::move(mapping), transport, group.endpoints, group.rank);
  flags->set_on_break([e = engine, st = stream](const std::string& why) { e->abort(st, why); });
  flag_setup = FlagSetup::kOn;
}

}  // namespace fsdp
