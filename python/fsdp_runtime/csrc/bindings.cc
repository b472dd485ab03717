// The Python module fsdp_runtime._C: the ProcessGroupFsdp type, a subclass of torch's ProcessGroup
// (so torch.distributed treats it as any other group). fsdp_runtime/__init__.py registers the backend.
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "python/fsdp_runtime/csrc/process_group_fsdp.h"

namespace py = pybind11;
using fsdp::torch_backend::ProcessGroupFsdp;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The fsdp runtime's c10d backend (docs/pytorch.md)";
  py::module_::import("torch.distributed");  // registers the ProcessGroup and Store types we build on
  py::class_<ProcessGroupFsdp, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupFsdp>>(m, "ProcessGroupFsdp")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupFsdp>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport", &ProcessGroupFsdp::transport);
}
