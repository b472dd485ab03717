// UCX transport over the ucp tag API (UCX is kept out of this header: link fsdp_transport_ucx).
//
// Start-up: each rank creates a ucp worker, publishes its worker address (with its rank and process
// identity) through `exchange`, creates one endpoint per peer with UCP_ERR_HANDLING_MODE_PEER, and
// says hello to every peer (connect_timeout bounds it all). With a job secret, every pair first proves
// it over the handshake of ucx_handshake.h, and each control message then carries the pair's session
// key: messages from anyone else who reaches the worker address are refused and logged, never
// delivered (connect_timeout bounds the handshake too). UCX picks the fabric from its own
// configuration: UCX_TLS (tcp; sm,self; posix,cma,self; rc,...) and the rest of UCX_* apply.
//
//   auto transport = make_ucx_transport(rank, size, directory_exchange(dir, rank, size, 30s), 30s);
//
// The protocol (fabric_transport.h): control messages carry the full 128-bit Tag on one UCX tag per
// sending rank; payloads over 32 KiB move as a UCX rendezvous straight between the user buffers under
// a UCX tag that names the sending rank and a data id the receiver chose. docs/transports.md says
// why the tag API and how the 64-bit UCX tag is laid out.
//
// Liveness: a peer whose endpoint UCX reports failed (tcp: connection reset; keepalive elsewhere), or
// whose process is gone (checked directly when it runs on this kernel), fails every request with it
// as peer-lost.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/transports/address_exchange.h"
#include "collectives/transports/transport.h"
#include "common/job_secret.h"

namespace fsdp {

struct UcxOptions {
  // The job secret every pair proves (raw bytes; empty: no handshake, and any process that reaches a
  // worker address can inject messages). FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE.
  std::string secret = job_secret_from_env().key;
};

// Throws CommError when UCX cannot start (naming the ucp call and status) or a published address
// belongs to another job or a peer that proved the secret describes another job, TimeoutError naming
// the ranks that never answered or never proved the secret (with the last message refused).
std::shared_ptr<Transport> make_ucx_transport(int rank, int size, const AddressExchange& exchange,
                                              std::chrono::milliseconds connect_timeout, UcxOptions options = {});

}  // namespace fsdp
