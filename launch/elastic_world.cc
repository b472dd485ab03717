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
  ew->enter_living(a.decision, a.decision.committed_step, timeout);
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
  connect_failures_.clear();
  last_grow_ = agree_on_grow(*store_, job_prefix_, epoch_ + 1, members_, committed_step, admitted_, last, timeout);
  last_agree_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  admitted_ = last;
  retired_ = std::move(world_);
  return enter_living(last_grow_, committed_step, timeout);  // the members keep their ranks; newcomers come last
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
  last_agree_seconds_ = 0;
  connect_failures_.clear();
  return enter_living(agree_without_lost(committed_step, timeout), committed_step, timeout);
}

int ElasticWorld::epoch_rank() const {
  return static_cast<int>(std::find(members_.begin(), members_.end(), original_.rank) - members_.begin());
}

RecoveryDecision ElasticWorld::agree_without_lost(int64_t committed_step, std::chrono::milliseconds timeout) {
  // In this epoch's numbering: the peers this rank sees lost (none where its world never connected; the
  // launcher's word is read by the agreement).
  const auto known_lost = [this] { return world_ ? lost_peers() : std::vector<int>{}; };
  const auto start = std::chrono::steady_clock::now();
  const int size = static_cast<int>(members_.size());
  RecoveryDecision d =
      agree_on_failure(*store_, job_prefix_, epoch_ + 1, epoch_rank(), size, committed_step, known_lost, timeout);
  last_agree_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Nothing of this epoch, nor of a grow's retired world (healthy until now), is waited on again: their
  // teardown aborts (Transport::failure) instead of meeting the others, the lost among them, at a barrier.
  const std::string why = "fault tolerance: epoch " + std::to_string(epoch_) + " ended (" +
                          std::to_string(size - static_cast<int>(d.survivors.size())) + " rank(s) lost)";
  for (World* w : {world_.get(), retired_.get()}) {
    if (w) w->transport->note_failure(why);
  }
  if (world_) {
    world_->comm->abort("fault tolerance: the survivors moved to epoch " + std::to_string(d.epoch));
    // The retired world is the one the state being rebuilt lives on (a grow's, or the first failed epoch's):
    // it stays until release_retired(); a world entered since holds nothing anyone still reads.
    if (retired_)
      world_.reset();
    else
      retired_ = std::move(world_);
  }
  return d;
}

RecoveryDecision ElasticWorld::enter_living(RecoveryDecision d, int64_t committed_step,
                                            std::chrono::milliseconds timeout) {
  for (;;) {
    // A rank of it that exited (the launcher's word) never arrives: the start-up stops waiting for it.
    options_.abandon = [this, ranks = d.launch_ranks] {
      for (int r : ranks) {
        if (r != original_.rank && peek(*store_, exited_key(job_prefix_, r))) {
          return "rank " + std::to_string(r) + " exited (the launcher's word)";
        }
      }
      return std::string();
    };
    try {
      const auto at = std::find(d.launch_ranks.begin(), d.launch_ranks.end(), original_.rank);
      enter(d, static_cast<int>(at - d.launch_ranks.begin()));
      options_.abandon = nullptr;
      entered_ = d;
      return d;
    } catch (const CommError& e) {  // a member of it lost before it connected (TimeoutError among them)
      connect_failures_ += (connect_failures_.empty() ? "" : "; ") + std::string("epoch ") + std::to_string(d.epoch) +
                           "'s world did not connect: " + e.what();
    }
    options_.abandon = nullptr;
    d = agree_without_lost(committed_step, timeout);
  }
}

void ElasticWorld::release_retired() { retired_.reset(); }

bool ElasticWorld::agree_rebuilt(bool rebuilt) {
  if (!store_ || !world_ || size() == 1) return rebuilt;
  StepCommit vote(store_, job_prefix_ + "ft/epoch" + std::to_string(epoch_) + "/rebuilt/", rank(), size());
  if (!rebuilt) return vote.close(0);  // "abort": this rank cannot have voted, so never a commit
  try {
    return vote.vote(
        0, [this] { return describe_lost(); }, options_.comm.timeout);
  } catch (const PeerLostDuringVote&) {
    return vote.close(0);  // a commit stands if every rank voted before the loss
  }
}

}  // namespace fsdp::launch
