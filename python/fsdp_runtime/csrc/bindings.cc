// The Python module fsdp_runtime._C:
//   ProcessGroupFsdp  a subclass of torch's ProcessGroup (torch.distributed treats it as any other
//                     group; fsdp_runtime/__init__.py registers the backend; shrink, abort and
//                     lost_peer serve fsdp_runtime.shrink_group, process_group_shrink.py);
//   ShardingGroups    the runtime's ProcessGroups (shard / replicate communicators) split from it, and
//                     the memory tracker of one sharded model;
//   FsdpUnit          one runtime FSDP unit (runtime/fsdp_unit.h) with its buffers shown to torch as
//                     tensors that view them (no copies): the flat master and gradient shards, and
//                     while unsharded the full parameters and gradients. fully_shard.py drives them;
//   FsdpSchedule      the runtime's FSDP schedule (runtime/fsdp_schedule.h) that decides for them
//                     (schedule_bindings.cc); fsdp_model_trace: FsdpModel's collectives, to compare;
//   clip_grad_norm    clip_grad_norm_'s norm and clip (runtime/grad_clip.h, FsdpModel's too);
//                     fsdp_model_clip_grad_norm: FsdpModel's over given gradients, to compare;
//   TrainConfig, DataLoader, MetricsLogger, read/write_safetensors: fsdp-train's, for train.py
//                     (train_bindings.cc).
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "common/dtype.h"
#include "common/knobs.h"
#include "common/memory_tracker.h"
#include "python/fsdp_runtime/csrc/fsdp_model_clip.h"
#include "python/fsdp_runtime/csrc/grad_watch.h"
#include "python/fsdp_runtime/csrc/process_group_fsdp.h"
#include "python/fsdp_runtime/csrc/schedule_bindings.h"
#include "python/fsdp_runtime/csrc/store_adapters.h"
#include "python/fsdp_runtime/csrc/train_bindings.h"
#include "runtime/fsdp_unit.h"
#include "runtime/grad_clip.h"
#include "runtime/lifecycle_trace.h"
#include "runtime/overlap.h"
#include "runtime/process_groups.h"
#include "spec/mesh.h"
#include "spec/policy.h"

namespace py = pybind11;
using fsdp::torch_backend::ProcessGroupFsdp;
using fsdp::torch_backend::RunStore;

namespace {

struct ShardingGroups {
  // reshard_group: reshard_after_forward = k keeps a 1/k slice over groups of k shard ranks (0: none).
  ShardingGroups(ProcessGroupFsdp& pg, int64_t replicate, int64_t reshard_group)
      : groups(fsdp::runtime::ProcessGroups::create(
            pg.communicator(), fsdp::spec::Mesh::for_world(pg.getSize(), replicate), reshard_group)) {}
  fsdp::MemoryTracker tracker;
  fsdp::runtime::ProcessGroups groups;

  // fsdp-train's overlap figure seen from torch's side, where the compute spans are not ours to time:
  // each collective's flight time against the training thread's waits for it. What is in flight while
  // the thread is not waiting is hidden (the meter's "compute" intervals are the waits here).
  using Clock = std::chrono::steady_clock;
  void waited(Clock::time_point start, Clock::time_point end) { waits.compute(start, end); }
  fsdp::runtime::OverlapMeter waits;
  fsdp::runtime::CommObserver observer = [this](fsdp::CollectiveKind kind, std::string_view, int unit,
                                                Clock::time_point start, Clock::time_point end, int64_t) {
    waits.communication(kind, start, end);
    if (recording && kind != fsdp::CollectiveKind::kAllReduce)
      events.emplace_back(std::string(name(kind)) + "_done", unit);
  };
  // While recording: each collective of the units as issued ("all_gather", unit) and finished
  // ("all_gather_done", unit), in that order: the schedule as fully_shard drove it (tests).
  bool recording = false;
  std::vector<std::pair<std::string, int>> events;
  fsdp::runtime::IssueObserver issued = [this](fsdp::CollectiveKind kind, int unit) {
    if (recording) events.emplace_back(std::string(name(kind)), unit);
  };
};

// Times the calling thread's wait on a collective into the groups' overlap meter.
class WaitSpan {
 public:
  explicit WaitSpan(ShardingGroups& g) : groups_(g), start_(ShardingGroups::Clock::now()) {}
  ~WaitSpan() { groups_.waited(start_, ShardingGroups::Clock::now()); }
  WaitSpan(const WaitSpan&) = delete;
  WaitSpan& operator=(const WaitSpan&) = delete;

 private:
  ShardingGroups& groups_;
  ShardingGroups::Clock::time_point start_;
};

// A tensor (float32 unless told) over runtime memory; valid while the buffer lives (the Python side drops views of
// the full parameters and gradients when the unit reshards).
at::Tensor view_of(void* data, std::vector<int64_t> shape, at::ScalarType type = at::kFloat) {
  return torch::from_blob(data, shape, torch::TensorOptions().dtype(type));
}

// torch's dtype of the three float types a unit carries, and back.
at::ScalarType scalar_type_of(fsdp::DataType t) {
  return t == fsdp::DataType::kBfloat16 ? at::kBFloat16 : t == fsdp::DataType::kFloat16 ? at::kHalf : at::kFloat;
}
std::optional<fsdp::DataType> float_type_of(at::ScalarType t) {
  if (t == at::kFloat) return fsdp::DataType::kFloat32;
  if (t == at::kBFloat16) return fsdp::DataType::kBfloat16;
  if (t == at::kHalf) return fsdp::DataType::kFloat16;
  return std::nullopt;
}

// The dtypes a unit carries (its all-gather and reduce-scatter run them): float32, bfloat16, float16.
fsdp::DataType float_type(const std::string& unit, const char* what, const std::string& s) {
  auto t = fsdp::parse_data_type(s);
  TORCH_CHECK_VALUE(
      t && (*t == fsdp::DataType::kFloat32 || *t == fsdp::DataType::kBfloat16 || *t == fsdp::DataType::kFloat16),
      "fsdp unit '", unit, "': ", what, " '", s, "' is not float32, bfloat16 or float16");
  return *t;
}
// param_dtype: what the all-gather carries and torch computes in (the unit keeps its full parameters in
// it: runtime/fsdp_unit.h's full_type); reduce_dtype: what the reduce-scatter carries and backward's
// gradients accumulate in until it runs.
fsdp::spec::Policy policy(const std::string& unit, const std::string& param_dtype, const std::string& reduce_dtype,
                          int64_t reshard_group) {
  fsdp::spec::Policy p;
  p.param_dtype = float_type(unit, "param_dtype", param_dtype);
  p.reduce_dtype = float_type(unit, "reduce_dtype", reduce_dtype);
  if (reshard_group > 0) {
    p.reshard.mode = fsdp::spec::Reshard::Mode::kGroup;
    p.reshard.group = reshard_group;
  }
  return p;
}

// fully_shard's arguments under the job's rules (spec/mesh.h, spec/policy.h validate), checked before
// fully_shard changes anything: the mesh fills the group, the prefetch depth, the reshard group divides
// the shard degree, the dtypes. ValueError with the rule's one text. Returns the reshard group (0: none).
int64_t validate_fully_shard(int64_t world_size, int64_t replicate, int64_t shard, const std::string& reshard,
                             const std::string& param_dtype, const std::string& reduce_dtype, int64_t prefetch) {
  const auto mesh = fsdp::spec::Mesh::for_world(world_size, replicate, shard);
  auto p = policy("fully_shard", param_dtype, reduce_dtype, 0);
  p.reshard = fsdp::spec::Reshard::parse(reshard);
  p.prefetch = prefetch;
  fsdp::spec::validate(p, mesh.shard_degree());
  return p.reshard.mode == fsdp::spec::Reshard::Mode::kGroup ? p.reshard.group : 0;
}

// fsdp_runtime.clip_grad_norm_ (runtime/grad_clip.h): `shards` the units' gradient shards (float32 views
// of runtime memory, clipped in place), `replicated` the gradients of parameters no unit took (any
// floating dtype: a float32 copy counts one that is not CPU float32 already, and torch scales it).
// groups: the units' (their shard group reduces the norm); None when there are no units. Collective.
double clip_grad_norm(ShardingGroups* groups, const std::vector<at::Tensor>& shards,
                      const std::vector<at::Tensor>& replicated, double max_norm, double norm_type) {
  auto span_of = [](const at::Tensor& t) {
    return std::span<float>(t.data_ptr<float>(), static_cast<size_t>(t.numel()));
  };
  std::vector<std::span<float>> in_place;
  for (const auto& t : shards) {
    TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat && t.is_contiguous() && t.device().is_cpu(),
                      "clip_grad_norm_: a unit's gradient shard is not a contiguous CPU float32 tensor (", t.dtype(),
                      ", ", t.device(), ")");
    in_place.push_back(span_of(t));
  }
  const size_t num_shards = in_place.size();
  std::vector<at::Tensor> copies, copied;  // float32 copies of the others, and those others
  for (const auto& t : replicated) {
    at::Tensor f = t.detach().to(at::kCPU, at::kFloat).contiguous();
    if (f.data_ptr() == t.data_ptr()) {
      in_place.push_back(span_of(f));
    } else {
      copies.push_back(f);
      copied.push_back(t.detach());
    }
  }
  std::vector<std::span<const float>> counted(in_place.begin(), in_place.end());
  for (const auto& f : copies) counted.push_back(span_of(f));
  const std::span<const std::span<const float>> all(counted);
  double norm = 0;
  {
    py::gil_scoped_release release;
    fsdp::Communicator* group = groups ? groups->groups.shard_reduce.get() : nullptr;
    norm = fsdp::runtime::total_grad_norm(all.first(num_shards), all.subspan(num_shards), group, norm_type);
  }
  const float scale = fsdp::runtime::clip_scale(norm, max_norm);
  fsdp::runtime::scale_grads(in_place, scale);
  if (scale != 1.0f) {
    for (auto& t : copied) t.mul_(scale);
  }
  return norm;
}

class TorchUnit {
 public:
  TorchUnit(std::shared_ptr<ShardingGroups> groups, int index, const std::string& name,
            const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
            const std::string& param_dtype, const std::string& reduce_dtype)
      : groups_(std::move(groups)),
        shapes_(shapes),
        unit_(index, spec(name, names, shapes), policy(name, param_dtype, reduce_dtype, groups_->groups.reshard_group),
              groups_->groups, groups_->tracker, float_type(name, "param_dtype", param_dtype)) {
    unit_.set_observer(&groups_->observer);
    unit_.set_issue_observer(&groups_->issued);
  }

  // Sets the master shard from the full parameters (flat float32, the unit's parameters in order).
  void load_full(const at::Tensor& flat) {
    TORCH_CHECK_VALUE(flat.scalar_type() == at::kFloat && flat.is_contiguous() && flat.device().is_cpu() &&
                          flat.numel() == unit_.layout().numel(),
                      "fsdp unit '", unit_.name(), "': load_full wants a contiguous CPU float32 tensor of ",
                      unit_.layout().numel(), " elements");
    unit_.load_full(flat.data_ptr<float>());
  }
  at::Tensor master_shard() { return view_of(unit_.master_shard().data(), {int64_t(unit_.master_shard().size())}); }
  at::Tensor grad_shard() { return view_of(unit_.grad_shard().data(), {int64_t(unit_.grad_shard().size())}); }
  ~TorchUnit() { empty_compute(); }
  TorchUnit(const TorchUnit&) = delete;
  TorchUnit& operator=(const TorchUnit&) = delete;

  // The flat tensor (numel of the unit, param-major, the param dtype) whose storage the module's
  // persistent parameters view (FSDP2's unsharded parameters). unshard() points that storage at the
  // unit's full parameters, reshard() empties it: the StorageImpl stays the same object, so every
  // parameter and every view autograd saved of one sees the full values whenever the unit is unsharded,
  // and nothing outside it is rebuilt.
  void bind_compute(const at::Tensor& flat) {
    const at::ScalarType type = scalar_type_of(unit_.full_type());
    TORCH_CHECK_VALUE(flat.device().is_cpu() && flat.is_contiguous() && flat.storage_offset() == 0 &&
                          flat.numel() == unit_.layout().numel() && flat.scalar_type() == type,
                      "fsdp unit '", unit_.name(), "': bind_compute wants a contiguous CPU ", type, " tensor of ",
                      unit_.layout().numel(), " elements");
    empty_compute();
    compute_ = flat;
    empty_compute();
  }

  // Hooks the trainable parameters' gradients once (grad_watch.h): each goes through add_grad as
  // autograd writes it; on_unarmed / on_complete are the unit's pre- and post-backward.
  void watch_grads(const std::vector<at::Tensor>& params, const std::vector<size_t>& trainable, py::function on_unarmed,
                   py::function on_complete) {
    TORCH_CHECK_VALUE(params.size() == shapes_.size(), "fsdp unit '", unit_.name(), "': watch_grads wants ",
                      shapes_.size(), " parameters, got ", params.size());
    watch_.reset();
    watch_ = std::make_unique<fsdp::torch_backend::GradWatch>(
        params, trainable, [this](size_t i, const at::Tensor& grad) { add_grad(i, grad); }, std::move(on_unarmed),
        std::move(on_complete));
  }
  void arm_grads() { watch().arm(); }
  void disarm_grads() { watch().disarm(); }

  // All-gathers (if sharded; waits for a started one) and fills the bound compute storage.
  void gather() {
    py::gil_scoped_release release;
    // torch's optimizer writes the master shard through its own view: whatever the unit derived from
    // the shard (its MXFP8 encoding) is stale. Asking for the writable shard says so.
    if (!unit_.unsharded()) unit_.master_shard();
    {
      WaitSpan wait(*groups_);
      unit_.wait_unshard();
    }
    fill_compute();
  }
  // gather(), and views of the full parameters in the param dtype (for state dicts; the step uses the
  // bound ones).
  std::vector<at::Tensor> unshard() {
    gather();
    std::vector<at::Tensor> out;
    const size_t elem = element_size(unit_.full_type());
    std::byte* at = unit_.full_params();
    for (const auto& shape : shapes_) {
      out.push_back(view_of(at, shape, scalar_type_of(unit_.full_type())));
      at += static_cast<size_t>(out.back().numel()) * elem;
    }
    return out;
  }
  // Starts the all-gather (a prefetch) without waiting; unshard() waits for it.
  void start_unshard() {
    py::gil_scoped_release release;
    if (!unit_.unsharded()) unit_.master_shard();  // as in unshard(): the optimizer wrote the shard
    unit_.start_unshard();
  }
  // keep_for_backward: after forward under reshard_after_forward = k, keep this rank's 1/k slice.
  void reshard(bool keep_for_backward) {
    empty_compute();
    unit_.reshard(keep_for_backward);
  }
  bool unsharded() const { return unit_.unsharded(); }
  // Views of the full gradients, param-major float32 (FsdpModel's path; fully_shard writes through
  // add_grad), zeroed when first asked for after a reduce; backward adds into them.
  std::vector<at::Tensor> grads() { return grad_tensors(unit_.grads()); }
  // The same, but a buffer allocated now is not zeroed: (views, fresh); when fresh, the caller writes
  // every view whole (copy_ of the first gradient, zero_ of a parameter backward never reached). The
  // front end's gradient path before add_grad: kept so bench/torch_interleaved.py --before runs it.
  std::pair<std::vector<at::Tensor>, bool> grads_for_overwrite() {
    bool fresh = false;
    auto views = unit_.grads(/*overwrite=*/true, &fresh);
    return {grad_tensors(views), fresh};
  }
  // Parameter i's gradient into the reduce-scatter's input (FsdpUnit::add_grad: copied the first time
  // since the last reduce, added after), converted to the reduce dtype on the way.
  void add_grad(size_t i, const at::Tensor& grad) {
    const auto type = float_type_of(grad.scalar_type());
    TORCH_CHECK_VALUE(i < shapes_.size() && type && grad.device().is_cpu() && grad.numel() == numel(i), "fsdp unit '",
                      unit_.name(), "': add_grad(", i, ") wants a CPU float32, bfloat16 or float16 tensor of ",
                      i < shapes_.size() ? numel(i) : 0, " elements, got ", grad.scalar_type(), " of ", grad.numel());
    const at::Tensor g = grad.contiguous();  // (a copy only for a strided gradient)
    unit_.add_grad(i, g.data_ptr(), *type);
  }
  // Reduce-scatters the full gradients (averaged over the shard group; all-reduced across replicas)
  // and adds the result into the grad shard.
  void reduce_grads() {
    py::gil_scoped_release release;
    WaitSpan wait(*groups_);
    unit_.start_reduce_grads();
    unit_.finish_reduce_grads();
  }
  // The same in two halves, so the reduce-scatter overlaps the rest of backward.
  void start_reduce_grads() {
    py::gil_scoped_release release;
    unit_.start_reduce_grads();
  }
  void finish_reduce_grads() {
    py::gil_scoped_release release;
    WaitSpan wait(*groups_);
    unit_.finish_reduce_grads();
  }
  bool has_unsharded_grads() const { return unit_.has_unsharded_grads(); }
  bool reduce_in_flight() const { return unit_.reduce_in_flight(); }
  void discard_grad_shard() { unit_.discard_grad_shard(); }
  void drop_unreduced_grads() { unit_.drop_unreduced_grads(); }
  // The front end's way before discard_grad_shard: kept so bench/torch_interleaved.py --before runs it.
  void zero_grad_shard() { unit_.zero_grad_shard(); }

 private:
  std::vector<at::Tensor> grad_tensors(std::span<float* const> views) const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < shapes_.size(); ++i) out.push_back(view_of(views[i], shapes_[i]));
    return out;
  }
  // The storage points at the unit's full buffer, in the param dtype the all-gather's copy-out wrote
  // (no copy, no conversion; the unit owns and frees it).
  void fill_compute() {
    if (!compute_.defined() || !unit_.unsharded()) return;
    c10::StorageImpl* impl = compute_.storage().unsafeGetStorageImpl();
    std::byte* full = unit_.full_params();
    if (impl->data() == full) return;
    impl->set_data_ptr_noswap(c10::DataPtr(full, c10::Device(c10::kCPU)));  // not owning
    impl->set_nbytes(static_cast<size_t>(compute_.numel()) * compute_.element_size());
  }
  int64_t numel(size_t i) const {
    int64_t n = 1;
    for (int64_t d : shapes_[i]) n *= d;
    return n;
  }
  void empty_compute() {
    if (!compute_.defined()) return;
    c10::StorageImpl* impl = compute_.storage().unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
    impl->set_nbytes(0);
  }

  static fsdp::spec::UnitSpec spec(const std::string& name, const std::vector<std::string>& names,
                                   const std::vector<std::vector<int64_t>>& shapes) {
    TORCH_CHECK_VALUE(names.size() == shapes.size() && !names.empty(), "fsdp unit '", name,
                      "': one shape per parameter name, at least one parameter");
    fsdp::spec::UnitSpec s;
    s.name = name;
    for (size_t i = 0; i < names.size(); ++i) s.params.push_back({names[i], shapes[i], fsdp::DataType::kFloat32});
    return s;
  }
  std::shared_ptr<ShardingGroups> groups_;
  std::vector<std::vector<int64_t>> shapes_;
  fsdp::torch_backend::GradWatch& watch() {
    TORCH_CHECK(watch_, "fsdp unit '", unit_.name(), "': no watch_grads() yet");
    return *watch_;
  }
  fsdp::runtime::FsdpUnit unit_;
  at::Tensor compute_;  // bind_compute()'s tensor (undefined: none bound)
  std::unique_ptr<fsdp::torch_backend::GradWatch> watch_;  // declared last: unhooked before unit_ goes
};

// clip_grad_norm, and FsdpModel::clip_grad_norm over `grads` (per unit, this rank's full gradients,
// flat) fed through its backward, collective over the group: (norm, [per unit: this rank's clipped
// gradient shard]), for a test to compare the two front ends.
void bind_clip(py::module_& m) {
  m.def("clip_grad_norm", &clip_grad_norm, py::arg("groups").none(true), py::arg("shards"), py::arg("replicated"),
        py::arg("max_norm"), py::arg("norm_type") = 2.0);
  m.def(
      "fsdp_model_clip_grad_norm",
      [](ProcessGroupFsdp& pg, int64_t replicate, const std::vector<std::vector<std::vector<int64_t>>>& units,
         const std::vector<std::vector<float>>& grads, double max_norm, double norm_type) {
        fsdp::torch_backend::ClipResult r;
        {
          py::gil_scoped_release release;
          r = fsdp::torch_backend::fsdp_model_clip_grad_norm(pg.communicator(), replicate, units, grads, max_norm,
                                                             norm_type);
        }
        return py::make_tuple(r.norm, r.shards);
      },
      py::arg("process_group"), py::arg("replicate"), py::arg("units"), py::arg("grads"), py::arg("max_norm"),
      py::arg("norm_type"));
}

// ShardingGroups: a unit's communicators, memory tracker and collective waits, as Python reads them.
void bind_sharding_groups(py::module_& m) {
  py::class_<ShardingGroups, std::shared_ptr<ShardingGroups>>(m, "ShardingGroups")
      .def(py::init([](ProcessGroupFsdp& pg, int64_t replicate, int64_t reshard_group) {
             return std::make_shared<ShardingGroups>(pg, replicate, reshard_group);
           }),
           py::arg("process_group"), py::arg("replicate_degree") = 1, py::arg("reshard_group") = 0,
           py::call_guard<py::gil_scoped_release>())
      // {category: (current bytes, peak bytes)} of the runtime's memory tracker (common/memory_tracker.h).
      .def("memory",
           [](const ShardingGroups& g) {
             py::dict out;
             for (int c = 0; c < static_cast<int>(fsdp::MemoryCategory::kCount); ++c) {
               const auto cat = static_cast<fsdp::MemoryCategory>(c);
               out[py::str(std::string(fsdp::name(cat)))] = py::make_tuple(g.tracker.current(cat), g.tracker.peak(cat));
             }
             return out;
           })
      .def("reset_peaks", [](ShardingGroups& g) { g.tracker.reset_peaks(); })
      // {kind: (seconds in flight, seconds hidden)} since the last clear_overlap(); kinds "all_gather",
      // "reduce_scatter", "all_reduce" (HSDP).
      .def("overlap",
           [](const ShardingGroups& g) {
             py::dict out;
             for (const auto& [kind, share] : g.waits.shares()) {
               out[py::str(kind)] = py::make_tuple(share.seconds, share.seconds - share.hidden_seconds);
             }
             return out;
           })
      .def("clear_overlap", [](ShardingGroups& g) { g.waits.clear(); })
      .def(
          "record_events", [](ShardingGroups& g, bool on) { g.recording = on; }, py::arg("on") = true)
      // [(what, unit index)] recorded since the last call (ShardingGroups::events).
      .def("events", [](ShardingGroups& g) { return std::exchange(g.events, {}); })
      .def_property_readonly("shard_degree", [](const ShardingGroups& g) { return g.groups.shard_degree(); })
      .def_property_readonly("replicate_degree", [](const ShardingGroups& g) { return g.groups.replicate_degree(); });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "The fsdp runtime's c10d backend and FSDP units (docs/pytorch.md)";
  py::module_::import("torch.distributed");  // registers the ProcessGroup and Store types we build on
  py::class_<ProcessGroupFsdp, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupFsdp>>(m, "ProcessGroupFsdp")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<ProcessGroupFsdp>(store, rank, size, timeout);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport", &ProcessGroupFsdp::transport)
      // fsdp_runtime.shrink_group's backend half (a ValueError naming a bad entry, from shrink_survivors).
      .def("shrink", &ProcessGroupFsdp::shrink, py::arg("excluded"), py::arg("abort"),
           py::call_guard<py::gil_scoped_release>())
      .def("abort", &ProcessGroupFsdp::abort, py::arg("why") = "aborted by the caller",
           py::call_guard<py::gil_scoped_release>())
      // None, or (rank in this group, why) of a member found gone.
      .def("lost_peer", [](ProcessGroupFsdp& pg) -> py::object {
        std::optional<fsdp::Communicator::LostPeer> lost;
        {
          py::gil_scoped_release release;
          lost = pg.lost_peer();
        }
        if (!lost) return py::none();
        return py::make_tuple(lost->rank, lost->why);
      });
  // The store fsdp-run / fsdp-store serves (store_adapters.h); from_env() is None without one.
  py::class_<RunStore, c10d::Store, c10::intrusive_ptr<RunStore>>(m, "RunStore")
      .def(py::init([](const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<RunStore>(host, port, timeout);
           }),
           py::arg("host"), py::arg("port"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def_static("from_env", &RunStore::from_env, py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def("__repr__", [](const RunStore& s) { return "<fsdp_runtime RunStore: " + s.describe() + ">"; });
  // FSDP_TIMEOUT_SEC as its one declaration (common/knobs.h) resolves it, default included: the
  // Python trainer's process-group timeout, with no second copy of the default in Python.
  m.def("timeout_sec", [] { return fsdp::knobs::kTimeoutSec.get(); });
  m.def("validate_fully_shard", &validate_fully_shard, py::arg("world_size"), py::arg("replicate"), py::arg("shard"),
        py::arg("reshard"), py::arg("param_dtype"), py::arg("reduce_dtype"), py::arg("prefetch"));

  bind_sharding_groups(m);

  py::class_<TorchUnit>(m, "FsdpUnit")
      .def(py::init<std::shared_ptr<ShardingGroups>, int, const std::string&, const std::vector<std::string>&,
                    const std::vector<std::vector<int64_t>>&, const std::string&, const std::string&>(),
           py::arg("groups"), py::arg("index"), py::arg("name"), py::arg("param_names"), py::arg("shapes"),
           py::arg("param_dtype") = "float32", py::arg("reduce_dtype") = "float32", py::keep_alive<1, 2>())
      .def("bind_compute", &TorchUnit::bind_compute)
      .def("load_full", &TorchUnit::load_full)
      .def("master_shard", &TorchUnit::master_shard, py::keep_alive<0, 1>())
      .def("grad_shard", &TorchUnit::grad_shard, py::keep_alive<0, 1>())
      .def("gather", &TorchUnit::gather)
      .def("unshard", &TorchUnit::unshard)
      .def("start_unshard", &TorchUnit::start_unshard)
      .def("reshard", &TorchUnit::reshard, py::arg("keep_for_backward") = false)
      .def_property_readonly("unsharded", &TorchUnit::unsharded)
      .def("grads", &TorchUnit::grads)
      .def("grads_for_overwrite", &TorchUnit::grads_for_overwrite)
      .def("add_grad", &TorchUnit::add_grad, py::arg("param"), py::arg("grad"))
      .def("watch_grads", &TorchUnit::watch_grads, py::arg("params"), py::arg("trainable"), py::arg("on_unarmed"),
           py::arg("on_complete"))
      .def("arm_grads", &TorchUnit::arm_grads)
      .def("disarm_grads", &TorchUnit::disarm_grads)
      .def("reduce_grads", &TorchUnit::reduce_grads)
      .def("start_reduce_grads", &TorchUnit::start_reduce_grads)
      .def("finish_reduce_grads", &TorchUnit::finish_reduce_grads)
      .def_property_readonly("has_unsharded_grads", &TorchUnit::has_unsharded_grads)
      .def_property_readonly("reduce_in_flight", &TorchUnit::reduce_in_flight)
      .def("discard_grad_shard", &TorchUnit::discard_grad_shard)
      .def("drop_unreduced_grads", &TorchUnit::drop_unreduced_grads)
      .def("zero_grad_shard", &TorchUnit::zero_grad_shard);
  // FsdpModel's collectives over `units` one-parameter units (runtime/lifecycle_trace.h), collective
  // over the group: [(step, "f" | "b", what, unit)], what fully_shard's schedule is compared with.
  m.def(
      "fsdp_model_trace",
      [](ProcessGroupFsdp& pg, int units, int64_t prefetch, const std::string& reshard, int steps) {
        fsdp::spec::Policy p = policy("fsdp_model_trace", "float32", "float32", 0);
        p.reshard = fsdp::spec::Reshard::parse(reshard);
        p.prefetch = prefetch;
        std::vector<fsdp::runtime::LifecycleEvent> events;
        {
          py::gil_scoped_release release;
          events = fsdp::runtime::trace_lifecycle(pg.communicator(), units, p, steps);
        }
        py::list out;
        for (const auto& e : events) out.append(py::make_tuple(e.step, std::string(1, e.phase), e.what, e.unit));
        return out;
      },
      py::arg("process_group"), py::arg("units"), py::arg("prefetch"), py::arg("reshard") = "default",
      py::arg("steps") = 2);
  bind_clip(m);
  fsdp::torch_backend::bind_schedule(m);
  fsdp::torch_backend::bind_train(m);
}
