// The rendezvous key-value store: one process (rank 0's launcher, say) runs a StoreServer; every rank
// opens a StoreClient to it and trades the addresses and counters that bootstrap communicators.
//
//   fsdp::launch::StoreServer server("10.0.0.7");              // port 0: the kernel picks one
//   fsdp::launch::StoreClient store("10.0.0.7", server.port());
//   store.set("rank3", listener.address());
//   std::string peer = store.get("rank4");                     // waits until rank 4 has set it
//
// Wire format: every connection first passes the job-secret handshake (store_frame.h); then frames of
// a 4-byte little-endian length and a serialized fsdp.proto.StoreRequest or StoreResponse
// (proto/store.proto, which also documents each op's semantics). Boost.Asio does the networking,
// hidden behind the pimpls so including this header costs nothing. The server is store_server.h, the
// client store_client.h; this header brings both.
#pragma once

#include "launch/store_client.h"
#include "launch/store_server.h"
