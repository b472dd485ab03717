// Growing back (docs/fault_tolerance.md, "Grow back"): a replacement process joins a running job at a
// step boundary. Keys, under the job's prefix ("fsdp/<run>/"):
//   ft/join/tickets        add()ed by each newcomer: its ticket t (1, 2, ..), the order of admission
//   ft/join/<t>            the newcomer's launch rank, set right after it took the ticket
//   ft/join/<t>/admitted   "epoch E tickets T": the grow that admitted it (every ticket up to T was decided)
//   ft/finished            the job ended: a newcomer still waiting exits
// The members learn of a waiting newcomer in the step's commit vote: ft/join/tickets is its snapshot
// counter, so the store writes the ticket count into the decision in the vote's own request ("commit T",
// launch/step_commit.h) and every member reads the same count with the decision it waits for anyway;
// T beyond the members' last admitted ticket (the same on every member) means grow now.
// After that step each member calls agree_on_grow: the decision of epoch E = every member, in order, then
// the newcomers of tickets (admitted, T] in ticket order (a newcomer whose entry never appears, or whose
// exit the launcher recorded, is skipped; of two tickets of one launch rank the later counts), written once
// by compare_set, so each member and newcomer reads the same one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "launch/failure_agreement.h"
#include "launch/key_value_store.h"

namespace fsdp::launch {

// Before a newcomer posts: waits until the survivors' latest decision (ft/current) went on without
// `launch_rank` (so no agreement still reads its ft/exited key), then clears that key, so the grow does
// not take the newcomer for the lost process. `give_up` as in wait_for_admission.
void wait_until_replaceable(KeyValueStore& store, const std::string& job_prefix, int launch_rank,
                            const std::function<bool()>& give_up);
// A newcomer's entry: returns its ticket.
int64_t post_join(KeyValueStore& store, const std::string& job_prefix, int launch_rank);
// The ticket counter: how many newcomers ever asked to join (the step commit's snapshot counter).
std::string join_tickets_key(const std::string& job_prefix);
// Its value (one round trip).
int64_t join_tickets(KeyValueStore& store, const std::string& job_prefix);

// The grow that starts epoch `new_epoch` from a world whose members are `members` (launch ranks, in
// rank order) standing at `committed_step`, admitting tickets (admitted, last_ticket]. Waits up to
// `timeout` for each entry. Every member calls it; all return the same decision (survivors 0..S-1).
RecoveryDecision agree_on_grow(KeyValueStore& store, const std::string& job_prefix, int64_t new_epoch,
                               const std::vector<int>& members, int64_t committed_step, int64_t admitted,
                               int64_t last_ticket, std::chrono::milliseconds timeout);

// The newcomer's wait: the decision that admitted `ticket` and the last ticket it decided (the newcomer's
// `admitted` from then on). False when the job finished first. `give_up` is asked every poll slice: true
// throws TimeoutError.
struct Admission {
  RecoveryDecision decision;
  int64_t last_ticket = 0;
};
bool wait_for_admission(KeyValueStore& store, const std::string& job_prefix, int64_t ticket, Admission* out,
                        const std::function<bool()>& give_up);

// The job's end, for newcomers still waiting.
void mark_finished(KeyValueStore& store, const std::string& job_prefix);

}  // namespace fsdp::launch
