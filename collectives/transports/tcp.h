// TCP transport between processes on any hosts, over Boost.Asio (kept out of this header so that
// including it costs nothing).
//
// Start-up is split so a rendezvous store can sit in the middle:
//   TcpListener listener = TcpListener::bind("10.0.0.7");     // port 0: the kernel picks one
//   store.set("rank3", listener.address());                    // publish "10.0.0.7:41237"
//   std::vector<TcpEndpoint> peers = ...gather every rank's...;
//   auto transport = make_tcp_transport(3, 8, std::move(listener), peers, 30s);
//
// TCP is a Fabric (fabric.h) under the protocol every fabric shares (fabric_transport.h): payloads up
// to kFabricEagerBytes ride with their header (eager: the send completes at once); larger ones are
// announced and streamed only once the receiver has matched them, straight into the posted buffer.
// What is TCP's own: per pair of ranks, connections_per_peer TCP connections, opened by the lower
// rank (so no two ranks ever wait on each other to connect) and identified by a TcpHello handshake;
// every control message of a pair travels on connection 0, so messages of one pair arrive, and match
// receives, in the order they were sent; the data of a large payload is striped across the pair's
// connections, each piece framed by a MessageHeader of kind kData (message_header.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/transports/tcp_handshake.h"  // TcpHello
#include "collectives/transports/transport.h"
#include "common/job_secret.h"

namespace fsdp {

inline constexpr int kTcpMaxConnectionsPerPeer = 8;

struct TcpEndpoint {
  std::string host;  // a numeric address or a name the resolver knows
  uint16_t port = 0;
  // "host:port" ("[host]:port" for IPv6), the form a rendezvous store publishes.
  std::string to_string() const;
  // Parses to_string()'s form; throws InvalidArgument on anything else.
  static TcpEndpoint parse(const std::string& text);
};

struct TcpOptions {
  // TCP connections per pair of ranks; large payloads are striped across them. 1 to 8.
  int connections_per_peer = 1;
  // SO_SNDBUF and SO_RCVBUF of every connection; 0 leaves the kernel's autotuning on. The kernel caps
  // it at net.core.wmem_max / rmem_max.
  int socket_buffer_bytes = 4 << 20;
  // The job secret every connection's handshake proves (raw bytes; empty: the empty key, which
  // authenticates nothing). FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE.
  std::string secret = job_secret_from_env().key;

  // FSDP_TCP_CONNECTIONS and FSDP_TCP_SOCKET_BUFFER_BYTES (common/knobs.h), the defaults where unset.
  // Throws InvalidArgument naming the variable on a malformed or out-of-range value.
  static TcpOptions from_env();
};

// A listening socket, bound before addresses are exchanged so its port can be published. Move-only;
// safe to create before fork() (it is a plain descriptor until a transport adopts it).
class TcpListener {
 public:
  // Binds host:port (port 0: the kernel picks a free one) and starts listening. Throws CommError when
  // the address is not local or the port is taken.
  static TcpListener bind(const std::string& host, uint16_t port = 0);

  TcpListener(TcpListener&& other) noexcept;
  TcpListener& operator=(TcpListener&& other) noexcept;
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  ~TcpListener();

  // The bound address with the port the kernel chose: what peers connect to.
  const TcpEndpoint& endpoint() const { return endpoint_; }
  std::string address() const { return endpoint_.to_string(); }
  bool valid() const { return fd_ >= 0; }
  // Hands the descriptor over (the listener becomes invalid).
  int release();

 private:
  TcpListener(int fd, TcpEndpoint endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  int fd_ = -1;
  TcpEndpoint endpoint_;
};

// Joins the job as `rank` of `size`. peers[r] is rank r's published listener (peers[rank] is ours and
// unused). Blocks until every connection is up and has passed the handshake, or `connect_timeout`
// passed: then throws TimeoutError naming the ranks that never connected (and the last connection
// refused, if any). A connection that does not prove the job secret (garbage, a forged or replayed
// hello, a rank of another job or secret) is refused, logged (rate-limited) and closed, and the
// wait goes on: a stranger cannot take a rank's place nor stop the job from starting. A peer that
// proved the secret but disagrees about the job (size, rank, connection count) throws CommError
// saying which, as does a listener that cannot prove the secret to this rank.
std::shared_ptr<Transport> make_tcp_transport(int rank, int size, TcpListener listener,
                                              const std::vector<TcpEndpoint>& peers,
                                              std::chrono::milliseconds connect_timeout, TcpOptions options = {});

}  // namespace fsdp
