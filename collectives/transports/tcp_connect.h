// TCP's connection set-up (the contract is make_tcp_transport's, tcp.h): per pair of ranks,
// connections_per_peer connections opened by the lower rank, each through the job-secret handshake
// (tcp_handshake.h) as non-blocking dial and accept state machines, retried until the timeout. What
// comes out is plain connected sockets for the fabric (tcp.cc); the listener and endpoints live here too.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "collectives/transports/tcp.h"

namespace fsdp {

// [peer][connection]: connections_per_peer sockets per peer, non-blocking, with TCP_NODELAY and the
// options' buffer sizes; the own rank's row holds null sockets.
using TcpSockets = std::vector<std::vector<std::unique_ptr<boost::asio::ip::tcp::socket>>>;

// Dials every higher rank and accepts every lower one on `listener` until all of `rank`'s connections
// passed the handshake; sockets are made on `io`. Throws as make_tcp_transport says (TimeoutError
// naming the ranks that never connected, CommError for a peer that disagrees about the job).
TcpSockets connect_tcp_peers(boost::asio::io_context& io, int rank, int size, TcpListener listener,
                             const std::vector<TcpEndpoint>& peers, std::chrono::milliseconds timeout,
                             const TcpOptions& options);

}  // namespace fsdp
