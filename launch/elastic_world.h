// A world that outlives its members (fault_tolerance.enable, docs/fault_tolerance.md): a sequence of epochs,
// each a World connected among the ranks still alive. Ranks keep their original number (the launcher's) in
// the store's keys; inside an epoch they are renumbered 0..size-1 in original order.
//
//   ElasticWorld ew(env, options);                  // epoch 0: every rank
//   ... ew.commit(step) once per step, before the optimizer (throws when a member is lost) ...
//   on a lost member:  committed = ew.close(step);  // the step in flight: kept or dropped, as every rank reads
//                      auto d = ew.shrink(last_committed, timeout);  // agree, reconnect without the lost
//                      ... rebuild the job's state over ew.comm(); ew.agree_rebuilt(ok): every rank did,
//                      else shrink again and rebuild from the same old state; then ew.release_retired();
//
// Growing back (launch/grow_agreement.h): a replacement process starts with ElasticWorld::join, which waits
// until the members admit it at a step boundary; the members learn of it through commit() (grow_ticket()
// != 0 after the step) and call grow(step, timeout), which reconnects a world with the newcomers last.
// A rank lost before a grown (or shrunk) world connects: grow, shrink and join go on to the shrink from it
// (their decision says who is left); the state is rebuilt as after any loss (train/job_recovery.h).
//
// The store must outlive every rank (fsdp-run's, or fsdp-store's): the constructor refuses a store that rank
// 0 serves. Rank 0 writes "<job>ft/enabled", which tells fsdp-run that a rank's exit is not the job's end.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launch/failure_agreement.h"
#include "launch/step_commit.h"
#include "launch/world.h"

namespace fsdp::launch {

class ElasticWorld {
 public:
  // Connects epoch 0 (connect_world). Throws InvalidArgument when the store is served by rank 0.
  ElasticWorld(const ProcessEnv& env, WorldOptions options);
  // A newcomer (FSDP_FT_JOIN=1, env.rank its launch rank): posts its ticket and waits until a grow admits
  // it, then connects that epoch's world. Null when the job finished first. Throws TimeoutError after
  // `timeout` without admission.
  static std::unique_ptr<ElasticWorld> join(const ProcessEnv& env, WorldOptions options,
                                            std::chrono::milliseconds timeout);
  ~ElasticWorld();
  ElasticWorld(const ElasticWorld&) = delete;
  ElasticWorld& operator=(const ElasticWorld&) = delete;

  World& world() { return *world_; }
  Communicator& comm() { return *world_->comm; }
  int rank() const { return world_->env.rank; }        // in the current epoch
  int size() const { return world_->env.world_size; }  // in the current epoch
  int original_rank() const { return original_.rank; }
  int original_size() const { return original_.world_size; }
  const std::vector<int>& members() const { return members_; }  // original ranks of this epoch, ascending
  int64_t epoch() const { return epoch_; }
  const std::string& job_prefix() const { return job_prefix_; }

  // The commit vote of `step` in this epoch: true when every member voted. Throws (PeerLostError) when a
  // member is found lost while waiting.
  bool commit(int64_t step);
  // Resolves `step` after a failure: true when it committed (every member voted before anyone closed it).
  bool close(int64_t step);

  // After a committed step: the last newcomer's ticket to admit now (grow()), or 0 when none waits.
  int64_t grow_ticket() const;
  // Every member, after the step grow_ticket() said so: agrees on the next epoch (the members in order,
  // then the newcomers), retires this epoch's world (still healthy: release_retired() shuts it down
  // with a barrier among the old members) and connects the grown one. Returns the decision of the epoch
  // it entered: the grown one, or, where a member or newcomer was lost before that world connected, the
  // shrink from it that the others agreed on (connect_failures() says why). Throws Fenced as shrink does.
  RecoveryDecision grow(int64_t committed_step, std::chrono::milliseconds timeout);
  // The decision of the epoch this rank is in (empty at epoch 0).
  const RecoveryDecision& entered() const { return entered_; }
  // Why the last grow, shrink or join connected a later epoch than it decided first ("" when none failed).
  const std::string& connect_failures() const { return connect_failures_; }
  // A newcomer's admission (epoch, the step it joins after); a member's last grow. Empty otherwise.
  const RecoveryDecision& last_grow() const { return last_grow_; }
  // The job ended: a newcomer still waiting gives up (rank 0 of the last epoch calls it).
  void mark_finished();

  // Members of this epoch that look lost (their process exited, their connection closed, the heartbeat
  // declared them frozen), as one line naming each by its launch rank and why; empty when none.
  std::string describe_lost();

  // Agrees with the survivors on who is left (d.survivors in this epoch's numbering, d.launch_ranks the
  // launcher's) and the last committed step (which every survivor must have
  // reached: see close()), then tears the current epoch's world down without waiting on anyone and connects
  // the next among the survivors. The old world is kept (retired) until release_retired(), so state that
  // lives in its communicators can be read meanwhile. Throws Fenced when the others went on without this
  // rank. Also from an epoch whose world never connected (a loss during a grow's or shrink's connect); a new
  // world that cannot connect for a lost member is shrunk from again (connect_failures()).
  RecoveryDecision shrink(int64_t committed_step, std::chrono::milliseconds timeout);
  void release_retired();
  // After a grow's or shrink's rebuild of the job's state in this epoch: whether every rank of it rebuilt,
  // one answer for all (a vote of its own, as a step's commit). A rank that could not (`rebuilt` false) or
  // is lost makes it false everywhere, so none goes on from a half-rebuilt epoch while another starts over
  // from the old state.
  bool agree_rebuilt(bool rebuilt);
  // The last shrink's or grow's time to agree, every agreement of it (the rest of it reconnected).
  double last_agree_seconds() const { return last_agree_seconds_; }

 private:
  struct Joining {};
  ElasticWorld(const ProcessEnv& env, WorldOptions options, Joining);
  void connect(const ProcessEnv& env);
  // Moves to the world of decision `d`, as rank `new_rank` of it.
  void enter(const RecoveryDecision& d, int new_rank);
  // The same members, by their rank in this epoch.
  std::vector<int> lost_peers();
  // This rank's position in the epoch's members, whether or not its world connected.
  int epoch_rank() const;
  // The agreement of a shrink from this epoch (its world connected or not); fails the worlds left behind.
  RecoveryDecision agree_without_lost(int64_t committed_step, std::chrono::milliseconds timeout);
  // Connects the world of `d`; while a member of it is lost before it connects, agrees on the next epoch
  // without the lost and connects that. Returns the decision entered.
  RecoveryDecision enter_living(RecoveryDecision d, int64_t committed_step, std::chrono::milliseconds timeout);
  std::string epoch_prefix(int64_t epoch) const;

  ProcessEnv original_;
  WorldOptions options_;
  std::string job_prefix_;
  std::shared_ptr<KeyValueStore> store_;  // the job's store, across epochs
  std::unique_ptr<World> world_;
  std::unique_ptr<World> retired_;
  std::unique_ptr<StepCommit> commit_;
  std::vector<int> members_;
  int64_t epoch_ = 0;
  int64_t admitted_ = 0;  // the last newcomer's ticket admitted so far (the same on every member)
  int64_t await_join_step_ = 0;  // FSDP_FT_AWAIT_JOIN_STEP (tests): the step whose commit waits for a newcomer
  RecoveryDecision last_grow_;
  RecoveryDecision entered_;
  std::string connect_failures_;
  double last_agree_seconds_ = 0;
};

}  // namespace fsdp::launch
