// The communicator's side of the flag path (collectives/flag_path.h): setting the segment up, and
// posting a collective there instead of giving it to the engine.
#include <unistd.h>

#include <algorithm>

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

std::optional<Work> Communicator::Impl::flag_path(Communicator& comm, const CommOptions& o, size_t bytes,
                                                  const FlagOp::Call& call) {
  if (bytes > std::min(o.flag_path_bytes, kFlagPayloadBytes) || group.endpoints.size() < 2) return std::nullopt;
  if (layout && layout->hosts() > 1) return std::nullopt;
  if (flag_setup == FlagSetup::kUntried) {
    try {
      set_up_flags(comm);
    } catch (const CommError&) {
      // The set-up's exchange failed (a peer never came, or died): this call fails with it, through
      // its Work like any collective's error.
      auto failed = std::make_shared<FlagOp>();
      failed->fail_unposted(
          std::current_exception(),
          ErrorContext{transport->rank(), -1, std::string(name(call.kind)), next_seq++, call.post_bytes},
          "setting up the flag path (rank 0's segment, every rank's mapping) failed: ");
      return Work(std::move(failed));
    }
  }
  if (flag_setup != FlagSetup::kOn) return std::nullopt;
  settle_flag_op();
  std::shared_ptr<FlagOp>& pooled = flag_pool[flag_ops % 2];  // reused once no Work holds it
  if (!pooled || pooled.use_count() > 1) pooled = std::make_shared<FlagOp>();
  OpPtr prior = last_ordered && last_ordered->state() == Op::State::kPending ? last_ordered : nullptr;
  pooled->post(flags, call, next_seq++, flag_ops++ % 2, o.timeout, group.context, std::move(prior), engine);
  flag_pending = pooled;
  return Work(pooled);
}

void Communicator::Impl::set_up_flags(Communicator& comm) {
  flag_setup = FlagSetup::kOff;
  if (!transport->shares_host_memory() || !transport->separate_processes()) return;
  flag_setup = FlagSetup::kSettingUp;  // the exchanges below take the engine
  const size_t bytes = FlagSegment::bytes_for(static_cast<int>(group.endpoints.size()));
  std::string error;
  int fd = -1;
  Mapping mapping;
  if (group.rank == 0) mapping = create_memfd("fsdp-flag-path", bytes, fd, error);
  int64_t where[2] = {::getpid(), fd};
  int64_t mapped = 0;
  try {
    comm.broadcast(where, where, 2, DataType::kInt64, 0).wait();
    if (group.rank != 0 && where[1] >= 0)
      mapping = map_peer_memfd(static_cast<int>(where[0]), static_cast<int>(where[1]), bytes, error);
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
