#include "launch/elastic_world.h"

#include <algorithm>
#include <thread>

#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "launch/grow_agreement.h"
#include "launch/store_client.h"

namespace fsdp::launch {

ElasticWorld::ElasticWorld(const ProcessEnv& env, WorldOptions options)
    : original_(env), options_(std::move(options)), await_join_step_(knobs::kFtAwaitJoinStep.get()) {
  job_prefix_ = options_.key_prefix.empty() ? job_key_prefix() : options_.key_prefix;
  if (!options_.external_store && env.world_size > 1) {
    throw InvalidArgument(
        "fault_tolerance.enable needs a store that outlives every rank: start the job with fsdp-run (or serve "
        "fsdp-store and set FSDP_STORE_EXTERNAL=1); rank 0 serves this job's store");
  }
  for (int r = 0; r < env.world_size; ++r) members_.push_back(r);
  connect(env);
  if (env.rank == 0 && store_) store_->set(job_prefix_ + "ft/enabled", "1");
}

ElasticWorld::ElasticWorld(const ProcessEnv& env, WorldOptions options, Joining)
    : original_(env), options_(std::move(options)) {
  job_prefix_ = options_.key_prefix.empty() ? job_key_prefix() : options_.key_prefix;
  if (env.master_addr.empty() || env.master_port == 0 || !options_.external_store) {
    throw InvalidArgument("FSDP_FT_JOIN: rank " + std::to_string(env.rank) +
                          " joins a running job through the store that outlives its ranks: set MASTER_ADDR and "
                          "MASTER_PORT to it, and FSDP_STORE_EXTERNAL=1");
  }
  StoreClientOptions so;
  so.connect_timeout = options_.rendezvous_timeout;
  so.timeout = options_.rendezvous_timeout;
  so.secret = options_.secret.key;
  so.rank = env.rank;
  store_ = std::make_shared<StoreClient>(env.master_addr, env.master_port, so);
}

std::unique_ptr<ElasticWorld> ElasticWorld::join(const ProcessEnv& env, WorldOptions options,
                                                 std::chrono::milliseconds timeout) {
  std::unique_ptr<ElasticWorld> ew(new ElasticWorld(env, std::move(options), Joining{}));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto expired = [deadline] { return std::chrono::steady_clock::now() >= deadline; };
  wait_until_replaceable(*ew->store_, ew->job_prefix_, env.rank, expired);
  const int64_t ticket = post_join(*ew->store_, ew->job_prefix_, env.rank);
  Admission a;
  if (!wait_for_admission(*ew->store_, ew->job_prefix_, ticket, &a, expired)) {
    return nullptr;
  }
  const std::vector<int>& ranks = a.decision.launch_ranks;
  const auto at =
      std::find(ranks.begin() + static_cast<std::ptrdiff_t>(a.decision.survivors.size()), ranks.end(), env.rank);
  if (at == ranks.end()) {
    throw Fenced("rank " + std::to_string(env.rank) + " asked to join (ticket " + std::to_string(ticket) +
                 ") but the grow that decided it left it out: " + encode_decision(a.decision));
  }
  ew->admitted_ = a.last_ticket;
  ew->last_grow_ = a.decision;
  ew->enter(a.decision, static_cast<int>(at - ranks.begin()));
  return ew;
}

ElasticWorld::~ElasticWorld() = default;

void ElasticWorld::enter(const RecoveryDecision& d, int new_rank) {
  members_ = d.launch_ranks;
  epoch_ = d.epoch;
  ProcessEnv env = original_;
  env.rank = new_rank;
  env.world_size = static_cast<int>(members_.size());
  env.local_rank = env.rank;
  env.local_world_size = env.world_size;
  connect(env);
}

int64_t ElasticWorld::grow_ticket() const {
  // Every member read the same decision and holds the same admitted_, so all answer alike.
  const int64_t tickets = commit_ ? commit_->last_snapshot().value_or(0) : 0;
  return tickets > admitted_ ? tickets : 0;
}

RecoveryDecision ElasticWorld::grow(int64_t committed_step, std::chrono::milliseconds timeout) {
  if (!store_) throw InvalidArgument("fault tolerance: this job has no store to grow through");
  const int64_t last = grow_ticket();
  const auto start = std::chrono::steady_clock::now();
  last_grow_ = agree_on_grow(*store_, job_prefix_, epoch_ + 1, members_, committed_step, admitted_, last, timeout);
  last_agree_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  admitted_ = last;
  retired_ = std::move(world_);
  enter(last_grow_, retired_->env.rank);  // the members keep their ranks; newcomers come last
  return last_grow_;
}

void ElasticWorld::mark_finished() {
  if (store_) launch::mark_finished(*store_, job_prefix_);
}

std::string ElasticWorld::epoch_prefix(int64_t epoch) const {
  return epoch == 0 ? job_prefix_ : job_prefix_ + "epoch" + std::to_string(epoch) + "/";
}

void ElasticWorld::connect(const ProcessEnv& env) {
  WorldOptions o = options_;
  o.key_prefix = epoch_prefix(epoch_);
  world_ = std::make_unique<World>(connect_world(env, o));
  if (world_->store) store_ = world_->store;
  // Each commit carries the grow ticket count, read by the store in the vote's own request.
  commit_ = store_ ? std::make_unique<StepCommit>(store_, job_prefix_ + "ft/epoch" + std::to_string(epoch_) + "/",
                                                  rank(), size(), join_tickets_key(job_prefix_))
                   : nullptr;
}

bool ElasticWorld::commit(int64_t step) {
  if (!commit_) return true;  // one rank alone: nothing to agree on
  // Tests (FSDP_FT_AWAIT_JOIN_STEP): every member waits for the replacement's ticket before voting on this
  // step, so the commit carries it and the job grows right after it. A lost member ends the wait: the
  // vote then throws.
  const auto deadline = std::chrono::steady_clock::now() + options_.rendezvous_timeout;
  while (step == await_join_step_ && join_tickets(*store_, job_prefix_) <= admitted_ &&
         std::chrono::steady_clock::now() < deadline && describe_lost().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return commit_->vote(
      step, [this] { return describe_lost(); }, options_.comm.timeout);
}

bool ElasticWorld::close(int64_t step) { return commit_ ? commit_->close(step) : true; }

std::vector<int> ElasticWorld::lost_peers() {
  std::vector<int> lost;
  for (int r = 0; r < size(); ++r) {
    if (r != rank() && !world_->transport->lost_reason(r).empty()) lost.push_back(r);
  }
  return lost;
}

std::string ElasticWorld::describe_lost() {
  std::string out;
  for (int r : lost_peers()) {
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(members_[static_cast<size_t>(r)]) + " (" +
           world_->transport->lost_reason(r) + ")";
  }
  return out;
}

RecoveryDecision ElasticWorld::shrink(int64_t committed_step, std::chrono::milliseconds timeout) {
  if (!store_) throw InvalidArgument("fault tolerance: this job has no store to agree through");
  // In this epoch's numbering: the peers this rank sees lost (the launcher's word is read by the agreement).
  const auto known_lost = [this] {
    std::vector<int> lost;
    for (int r = 0; r < size(); ++r) {
      if (r != rank() && !world_->transport->lost_reason(r).empty()) lost.push_back(r);
    }
    return lost;
  };
  const auto start = std::chrono::steady_clock::now();
  RecoveryDecision d =
      agree_on_failure(*store_, job_prefix_, epoch_ + 1, rank(), size(), committed_step, known_lost, timeout);
  last_agree_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Nothing of the old epoch is waited on again: its teardown aborts (Transport::failure) instead of
  // meeting the others at a barrier.
  world_->transport->note_failure("fault tolerance: epoch " + std::to_string(epoch_) + " ended (" +
                                  std::to_string(size() - static_cast<int>(d.survivors.size())) + " rank(s) lost)");
  world_->comm->abort("fault tolerance: the survivors moved to epoch " + std::to_string(d.epoch));
  const int new_rank =
      static_cast<int>(std::find(d.survivors.begin(), d.survivors.end(), rank()) - d.survivors.begin());
  retired_ = std::move(world_);
  enter(d, new_rank);
  return d;
}

void ElasticWorld::release_retired() { retired_.reset(); }

}  // namespace fsdp::launch
