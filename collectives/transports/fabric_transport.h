// A Transport over any Fabric (fabric.h): the one message protocol, which the TCP, UCX and MPI
// transports share (shared memory shares its header, kinds and matching: shm.cc says why it is not a
// fabric).
//
// A fabric's tag is narrower than ours (UCX: 64 bits, MPI: 31; TCP has none), and the Tag's context
// is a 64-bit hash, so no fixed map of the 128-bit Tag into a fabric tag is free of collisions.
// Instead the full Tag never enters the fabric's matching at all: it travels in the MessageHeader
// (message_header.h) of a control message and is matched here, exactly, by ReceiveMatcher. The
// fabric only ever matches on (peer, data id), and data ids are unique among a receiver's transfers
// in flight, so two messages can never cross.
//
//   payload <= kFabricEagerBytes: one control message, header + payload (eager). The send completes
//     when the fabric has taken the message; an early message waits in ReceiveMatcher (a copy).
//   larger: request-to-send (header) -> the receiver matches it, posts a data receive straight into
//     the user's buffer under a fresh data id and answers clear-to-send naming that id -> the sender
//     posts its data send under that id. The fabric then moves the bytes into the posted buffer
//     (UCX: CMA or RDMA get; MPI: its single-copy path; TCP: pieces striped over the pair's
//     connections, read straight into place).
// Sizes are compared on the first matched control message: an eager mismatch fails the receive; a
// large one fails both sides (clear-to-send carries the verdict) and no data moves.
//
// Start-up: every rank sends a hello to every other and waits for all of theirs (connect_timeout),
// so a rank that cannot reach another fails at once, naming it, and the first collective does not
// pay the fabric's connection set-up.
#pragma once

#include <chrono>
#include <memory>

#include "collectives/transports/fabric.h"
#include "collectives/transports/transport.h"

namespace fsdp {

// Throws TimeoutError naming the ranks whose hello never came, CommError on a hello from another job
// or a fabric failure during start-up.
std::shared_ptr<Transport> make_fabric_transport(std::unique_ptr<Fabric> fabric,
                                                 std::chrono::milliseconds connect_timeout);

}  // namespace fsdp
