// One unit's gradient arrival in C++ (fully_shard's path, _fsdp_param_group.py): a post-hook on each
// trainable parameter's AccumulateGrad node, registered once, hands the gradient autograd just wrote
// to `take` (the unit's add_grad: straight into the reduce-scatter's input) and drops the parameter's
// .grad. The unit's Python state is called only twice per backward, not once per parameter:
//   on_unarmed   a gradient arrived before the unit's pre-backward ran (outputs its hook could not
//                see): its pre-backward, which arms the watch;
//   on_complete  the last pending parameter's gradient is in: its post-backward (which disarms).
// The hooks run on autograd's thread without the GIL; the two callbacks take it.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/function.h>

#include <functional>
#include <memory>
#include <vector>

namespace fsdp::torch_backend {

// Hidden, as pybind11 keeps its own types (the callbacks are pybind11 objects).
class __attribute__((visibility("hidden"))) GradWatch {
 public:
  using Take = std::function<void(size_t param, const at::Tensor& grad)>;

  // params: the unit's persistent parameters (leaves); trainable: the indices that require grad.
  GradWatch(const std::vector<at::Tensor>& params, const std::vector<size_t>& trainable, Take take,
            pybind11::function on_unarmed, pybind11::function on_complete);
  ~GradWatch();  // unhooks (the accumulators are kept alive until then, so no hook outlives the watch)
  GradWatch(const GradWatch&) = delete;
  GradWatch& operator=(const GradWatch&) = delete;

  void arm();     // the pre-backward: every trainable parameter's gradient is pending
  void disarm();  // the post-backward: none is

 private:
  struct Hook;
  void on_grad(size_t param);
  static void call(const pybind11::function& f);

  std::vector<at::Tensor> params_;
  std::vector<size_t> trainable_;
  Take take_;
  pybind11::function on_unarmed_, on_complete_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;  // (accumulator, key)
  std::vector<char> pending_;                                                        // per parameter
  size_t pending_count_ = 0;
  bool armed_ = false;
};

}  // namespace fsdp::torch_backend
