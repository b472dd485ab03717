// The c10d backend "fsdp": torch.distributed's ProcessGroup over the project's Communicator.
//
//   import fsdp_runtime                       # registers the backend
//   torch.distributed.init_process_group("fsdp")
//
// Construction rendezvouses through the c10d::Store torch hands the group (adapted to the launch
// layer's KeyValueStore), then connect_world picks the transport as for any job (shm on one host,
// shm+tcp across hosts, FSDP_TRANSPORT to force one). Every op runs asynchronously on the progress
// engine; its FsdpWork waits with the group's timeout and rethrows the runtime's error text (rank,
// peer, op, sequence) as a Python RuntimeError. CPU tensors only, contiguous, dtypes of DataType
// (bool travels as uint8). docs/pytorch.md lists what works and what does not yet.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "launch/world.h"

namespace fsdp::torch_backend {

class ProcessGroupFsdp : public c10d::ProcessGroup {
 public:
  // Collective over the group's members: blocks until every rank joined (or `timeout` passed).
  ProcessGroupFsdp(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  // The group over `shrunk`, a communicator shrunk from one of `world`'s (shrink() makes it).
  ProcessGroupFsdp(std::shared_ptr<launch::World> world, std::unique_ptr<Communicator> shrunk,
                   std::chrono::milliseconds timeout);
  // The last group of a world ends it (World::shutdown: a barrier, then teardown; after a failure an
  // abort); never hangs past the timeout.
  ~ProcessGroupFsdp() override;

  const std::string getBackendName() const override { return "fsdp"; }
  // The transport connect_world chose: "shm", "shm+tcp", "tcp", ...
  const std::string& transport() const { return world_->transport_name; }
  // The communicator over the group's members (fully_shard splits its process groups from it).
  Communicator& communicator() { return *comm_; }

  // Local, with no message and no wait on anyone: the group of the ranks not in `excluded` (ranks of
  // this group), renumbered in order, over this group's transport (Communicator::shrink). Every
  // survivor passes the same set; the excluded ranks do not call it. `abort` first fails what this
  // group has in flight (AbortedError) and leaves it broken. Throws InvalidArgument naming the entry
  // (out of range, listed twice, this rank, every rank) before anything changed.
  c10::intrusive_ptr<ProcessGroupFsdp> shrink(const std::vector<int>& excluded, bool abort);
  // Fails everything in flight with AbortedError and breaks the group (torchft's ProcessGroup.abort);
  // from any thread, also while another is blocked in a call on this group.
  void abort(const std::string& why);
  // A member the transport finds gone (process exited, connection closed, heartbeat silent), polled
  // now: a survivor learns who to exclude without an operation having to fail on it.
  std::optional<Communicator::LostPeer> lost_peer();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // One point-to-point message of a gather, scatter or all-to-all: `bytes` to or from `peer`.
  struct Transfer {
    int peer;
    void* data;
    size_t bytes;
  };
  // Posts every send and receive at once (they never wait behind each other), for the ops the
  // Communicator has no collective for.
  std::vector<fsdp::Work> exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs);
  // The handle of an op made of `parts`; `after` runs once they completed (copy-out), `keep_alive`
  // holds the buffers they read or write until then.
  c10::intrusive_ptr<c10d::Work> make_work(c10d::OpType type, std::string what, std::vector<fsdp::Work> parts,
                                           std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep_alive,
                                           std::function<void()> after, std::chrono::milliseconds timeout);

  // Shared by the group init_process_group made and every group shrunk from it: the transport, and
  // the orderly shutdown, last as long as any of them.
  std::shared_ptr<launch::World> world_;
  std::unique_ptr<Communicator> shrunk_;  // a shrunk group's own communicator; null for the world's
  Communicator* comm_ = nullptr;          // world_->comm or shrunk_
  std::chrono::milliseconds timeout_;
  // Calls into the communicator take turns: c10d lets several threads use one process group (gloo
  // queues their calls), and a Communicator's calls must be ordered (sequence numbers, its Op pool).
  std::mutex calls_mu_;
};

}  // namespace fsdp::torch_backend
