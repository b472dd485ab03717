// fsdp_runtime._C's FsdpSchedule (schedule_bindings.cc): the runtime's FSDP schedule
// (runtime/fsdp_schedule.h), which fully_shard's per-root state asks what to start, keep and finish.
#pragma once

#include <pybind11/pybind11.h>

namespace fsdp::torch_backend {

void bind_schedule(pybind11::module_& m);

}  // namespace fsdp::torch_backend
