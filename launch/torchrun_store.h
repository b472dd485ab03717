// Under torchrun, join the store its agent serves, as torch's own worker processes do.
//
// torchrun's agent serves a c10d TCPStore on MASTER_ADDR:MASTER_PORT and tells its workers so with
// TORCHELASTIC_USE_AGENT_STORE=True (static rendezvous, the default with --master_port; torch >= 2.4
// also with --standalone / c10d). Serving a second store on that port would fail to bind, so
// connect_world joins the agent's instead, through TorchStoreClient. Where the variable says False
// (torch 1.13's --standalone), MASTER_PORT is a free port the agent picked and rank 0 serves our own
// store there, as torch's rank 0 would.
#pragma once

#include <chrono>
#include <memory>

#include "launch/bootstrap.h"
#include "launch/key_value_store.h"

namespace fsdp::launch {

// The agent's store, or null when this process should find or serve one itself: not under torchrun's
// agent store, or FSDP_MASTER_PORT / FSDP_STORE_EXTERNAL name another store. Every key goes under
// "fsdp.torchrun/<TORCHELASTIC_RUN_ID>/<TORCHELASTIC_RESTART_COUNT>/" (then the job's own prefix), so it
// never meets the agent's keys nor a previous attempt's. Throws TimeoutError when the store does not
// answer within `timeout`.
std::shared_ptr<KeyValueStore> join_torchrun_store(const ProcessEnv& env, bool external_store,
                                                   std::chrono::milliseconds timeout, const EnvReader& reader = {});

}  // namespace fsdp::launch
