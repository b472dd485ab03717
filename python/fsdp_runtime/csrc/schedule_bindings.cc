// The runtime's FSDP schedule for python/fsdp_runtime/_fsdp_state.py: one per root, recording its
// order every forward, as FsdpModel's follows units 0..n-1. No torch headers here (they cost ~20 s per
// translation unit): only unit ids and decisions cross.
#include "python/fsdp_runtime/csrc/schedule_bindings.h"

#include <pybind11/stl.h>

#include "runtime/fsdp_schedule.h"
#include "spec/policy.h"
#include "spec/spec_error.h"

namespace py = pybind11;

namespace fsdp::torch_backend {
namespace {

using runtime::FsdpSchedule;

py::list to_list(std::span<const int> units) {
  py::list out(units.size());
  for (size_t i = 0; i < units.size(); ++i) out[i] = units[i];
  return out;
}

}  // namespace

void bind_schedule(py::module_& m) {
  // reshard_after_forward as the job's Reshard ("default", "never", or the group size k).
  py::class_<spec::Reshard>(m, "Reshard")
      .def(py::init([](const std::string& text) {
             try {
               return spec::Reshard::parse(text);
             } catch (const spec::SpecError& e) {
               throw py::value_error(e.what());
             }
           }),
           py::arg("text"))
      .def("__repr__", [](const spec::Reshard& r) { return "Reshard(" + r.to_string() + ")"; });

  py::enum_<FsdpSchedule::AfterForward>(m, "AfterForward")
      .value("KEEP", FsdpSchedule::AfterForward::kKeep)
      .value("FREE", FsdpSchedule::AfterForward::kFree)
      .value("KEEP_SLICE", FsdpSchedule::AfterForward::kKeepSlice);

  py::class_<FsdpSchedule>(m, "FsdpSchedule")
      .def(py::init<>())
      .def_static("fixed", &FsdpSchedule::fixed, py::arg("num_units"))
      // [units whose all-gathers start after u's own]
      .def(
          "pre_forward", [](FsdpSchedule& s, int u, int64_t prefetch) { return to_list(s.pre_forward(u, prefetch)); },
          py::arg("unit"), py::arg("prefetch"))
      // (int(AfterForward), whether this ended the forward): an int, compared in Python at a tenth of
      // the cost of a pybind11 enum value (a new object per call, compared through a bound function)
      .def(
          "post_forward",
          [](FsdpSchedule& s, int u, const spec::Reshard& reshard, bool backward_follows) {
            const auto after = s.post_forward(u, reshard, backward_follows);
            return py::make_tuple(static_cast<int>(after), !s.forward_open());
          },
          py::arg("unit"), py::arg("reshard"), py::arg("backward_follows"))
      .def("unused_prefetches", &FsdpSchedule::unused_prefetches)
      .def_property_readonly("order", &FsdpSchedule::order)
      .def_property_readonly("post_order", &FsdpSchedule::post_order)
      .def(
          "pre_backward", [](FsdpSchedule& s, int u, int64_t prefetch) { return to_list(s.pre_backward(u, prefetch)); },
          py::arg("unit"), py::arg("prefetch"))
      .def_property_readonly("in_backward", &FsdpSchedule::in_backward)
      .def_property_readonly("backward_units", &FsdpSchedule::backward_units)
      // (whether u reduce-scatters, the unit whose reduce-scatter finishes first or -1)
      .def(
          "post_backward",
          [](FsdpSchedule& s, int u, bool sync) {
            const auto r = s.post_backward(u, sync);
            return py::make_tuple(r.start, r.finish_first);
          },
          py::arg("unit"), py::arg("sync"))
      .def("finish_backward", &FsdpSchedule::finish_backward)
      .def("discard_step", &FsdpSchedule::discard_step)
      .def("next_step_gathers", &FsdpSchedule::next_step_gathers, py::arg("unit"), py::arg("prefetch"));
}

}  // namespace fsdp::torch_backend
