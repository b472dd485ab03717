#include "python/fsdp_runtime/csrc/grad_watch.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace fsdp::torch_backend {

struct GradWatch::Hook : torch::autograd::FunctionPostHook {
  Hook(GradWatch* w, size_t i) : watch(w), param(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    watch->on_grad(param);  // AccumulateGrad has written the parameter's .grad
    return outputs;
  }
  GradWatch* watch;
  size_t param;
};

GradWatch::GradWatch(const std::vector<at::Tensor>& params, const std::vector<size_t>& trainable, Take take,
                     pybind11::function on_unarmed, pybind11::function on_complete)
    : params_(params),
      trainable_(trainable),
      take_(std::move(take)),
      on_unarmed_(std::move(on_unarmed)),
      on_complete_(std::move(on_complete)),
      pending_(params.size(), 0) {
  for (size_t i : trainable_) {  // all checked before any hook exists: a throw leaves none behind
    TORCH_CHECK_VALUE(i < params_.size() && params_[i].requires_grad() && params_[i].is_leaf(), "GradWatch: parameter ",
                      i, " is not a leaf that requires grad");
  }
  hooks_.reserve(trainable_.size());
  for (size_t i : trainable_) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    const uintptr_t key = acc->add_post_hook(std::make_unique<Hook>(this, i));
    hooks_.emplace_back(std::move(acc), key);
  }
}

GradWatch::~GradWatch() {
  for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
  pybind11::gil_scoped_acquire gil;  // the callbacks are Python objects
  on_unarmed_ = pybind11::function();
  on_complete_ = pybind11::function();
}

void GradWatch::arm() {
  for (size_t i : trainable_) pending_[i] = 1;
  pending_count_ = trainable_.size();
  armed_ = true;
}

void GradWatch::disarm() {
  std::fill(pending_.begin(), pending_.end(), 0);
  pending_count_ = 0;
  armed_ = false;
}

void GradWatch::call(const pybind11::function& f) {
  pybind11::gil_scoped_acquire gil;
  try {
    f();
  } catch (pybind11::error_already_set& e) {
    // As torch's own Python hooks fail: backward() raises the callback's exception itself.
    e.restore();
    python_error err;
    err.persist();
    throw err;
  }
}

void GradWatch::on_grad(size_t param) {
  at::Tensor& slot = params_[param].mutable_grad();
  if (!slot.defined()) return;
  const at::Tensor grad = std::move(slot);
  slot.reset();  // the unit holds the gradient now, in its reduce-scatter input
  if (!armed_) call(on_unarmed_);
  take_(param, grad);
  if (pending_[param]) {
    pending_[param] = 0;
    if (--pending_count_ == 0) call(on_complete_);
  }
}

}  // namespace fsdp::torch_backend
