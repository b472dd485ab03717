// fsdp_runtime._C's training front-end pieces (train_bindings.cc): fsdp-train's configuration reader,
// data loader, metrics logger and safetensors files, for python/fsdp_runtime/train.py.
#pragma once

#include <pybind11/pybind11.h>

namespace fsdp::torch_backend {

void bind_train(pybind11::module_& m);

}  // namespace fsdp::torch_backend
