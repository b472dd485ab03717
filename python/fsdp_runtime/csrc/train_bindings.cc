// The parts of fsdp-train that python/fsdp_runtime/train.py reuses rather than rewrites, so the two
// front ends read the same TOML (same keys, defaults, validation and errors), the same tokens for every
// (step, micro-step, row), print the same metrics line and share the safetensors format. No torch
// headers here (they cost ~20 s per translation unit): tensors cross as bytes.
#include "python/fsdp_runtime/csrc/train_bindings.h"

#include <pybind11/stl.h>

#include <cstring>
#include <sstream>

#include "common/process_memory.h"
#include "launch/bootstrap.h"
#include "model/blas_core.h"
#include "model/init.h"
#include "model/ops.h"
#include "runtime/checkpoint/safetensors.h"
#include "sharding/cost_model.h"
#include "spec/policy.h"
#include "train/config.h"
#include "train/data_setup.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/run_report.h"
#include "train/train_job.h"

namespace py = pybind11;

namespace fsdp::torch_backend {
namespace {

using train::TrainConfig;

// A configuration from fsdp-train's command line (`--config FILE --section.key value ...`), validated
// for `world_size` ranks.
struct JobConfig {
  JobConfig(const std::vector<std::string>& args, int64_t world_size) {
    std::vector<const char*> argv{"fsdp_runtime.train"};
    for (const auto& a : args) argv.push_back(a.c_str());
    const auto command_line = train::parse_command_line(static_cast<int>(argv.size()), argv.data());
    help = command_line.help;
    print_config = command_line.print_config;
    config = train::load_train_config(command_line);
    if (print_config) {
      config.resolve_keys(world_size);  // printed whether or not the data and tokenizer are there
    } else if (!help) {
      config.validate(world_size);
    }
  }
  TrainConfig config;
  bool help = false;
  bool print_config = false;
};

// One rank's data: fsdp-train's DataLoader over the job's token source.
class JobData {
 public:
  JobData(const JobConfig& c, int rank)
      : loader_(train::make_job_token_source(c.config, c.config.model_spec().dims.vocab,
                                             static_cast<uint64_t>(c.config.training.seed)),
                train::data_loader_options(c.config, rank)) {}
  // (step, micro_step, B, T, inputs, targets): the next micro-batch, tokens as int32 bytes, (B, T) row-major.
  py::tuple next() {
    loader_.next(batch_);
    const auto bytes = [](const std::vector<train::Token>& v) {
      return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(train::Token));
    };
    return py::make_tuple(batch_.step, batch_.micro_step, batch_.batch_size, batch_.seq_len, bytes(batch_.inputs),
                          bytes(batch_.targets));
  }

 private:
  train::DataLoader loader_;
  train::Batch batch_;
};

// fsdp-train's MetricsLogger and run report: log() returns the console text to print ("" on steps it
// does not print); event() writes an event line; report() rewrites report.html beside the metrics file
// (train/run_report.h) and returns its warning, and at the end the "report: PATH" line, to print.
class JobMetrics {
 public:
  JobMetrics(const JobConfig& c, int rank, bool console)
      : rank_(rank),
        console_(console),
        logger_(train::job_metrics_options(c.config, rank, console ? &text_ : nullptr)) {}
  std::string log(int64_t step, double loss, double grad_norm, double lr, int64_t tokens, double seconds,
                  int64_t memory_bytes, bool skipped, double comm_hidden) {
    logger_.log(train::StepRecord{step, loss, grad_norm, lr, tokens, seconds, memory_bytes, skipped, comm_hidden});
    return take();
  }
  void event(const std::string& kind, int64_t step, const std::string& detail) {
    logger_.log_event({kind, step, detail});
  }
  std::string report(bool last) {
    const std::string path = train::refresh_run_report(logger_, rank_, console_ ? &text_ : nullptr);
    if (last && console_ && !path.empty()) text_ << "report: " << path << "\n";
    return take();
  }
  std::string summary() {
    logger_.print_summary();
    return take();
  }

 private:
  std::string take() {
    std::string s = text_.str();
    text_.str("");
    return s;
  }
  int rank_;
  bool console_;
  std::ostringstream text_;
  train::MetricsLogger logger_;
};

py::dict model_dims(const JobConfig& c) {
  const auto spec = c.config.model_spec();
  py::dict d;
  d["dim"] = spec.dims.dim;
  d["n_layers"] = spec.dims.layers;
  d["n_heads"] = spec.dims.n_heads;
  d["n_kv_heads"] = spec.dims.n_kv_heads;
  d["hidden"] = spec.dims.ffn_hidden;
  d["vocab"] = spec.dims.vocab;
  d["num_experts"] = spec.dims.moe.num_experts;
  d["flops_per_token"] = sharding::model_flops_per_token(spec, c.config.training.seq_len);
  return d;
}

// [(name, shape, float32 bytes)] of a safetensors file (any of F32, BF16, F16 read as float32).
py::list read_safetensors(const std::string& path) {
  std::vector<runtime::checkpoint::NamedTensor> tensors;
  {
    py::gil_scoped_release release;
    tensors = runtime::checkpoint::read_safetensors(path, {});
  }
  py::list out;
  for (const auto& t : tensors) {
    out.append(py::make_tuple(t.name, t.shape,
                              py::bytes(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float))));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::tuple<std::string, std::vector<int64_t>, py::bytes>>& in,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<runtime::checkpoint::NamedTensor> tensors;
  for (const auto& [name, shape, data] : in) {
    const std::string_view bytes = data;
    runtime::checkpoint::NamedTensor t{name, shape, std::vector<float>(bytes.size() / sizeof(float))};
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (bytes.size() % sizeof(float) != 0 || static_cast<int64_t>(t.data.size()) != numel) {
      throw py::value_error("write_safetensors: tensor '" + name + "' has " + std::to_string(bytes.size()) +
                            " bytes, its shape wants " + std::to_string(numel) + " float32 values");
    }
    std::memcpy(t.data.data(), bytes.data(), bytes.size());
    tensors.push_back(std::move(t));
  }
  py::gil_scoped_release release;
  runtime::checkpoint::write_safetensors(path, tensors, metadata, {});
}

// fsdp-train's initialisation of one parameter (model/init.h: a pure function of seed, name and element
// index) written into `out`, a writable C-contiguous float32 buffer of the parameter's shape (a CPU
// tensor's .numpy()), so both front ends start from the same weights.
void init_parameter(const py::buffer& out, const std::string& name, uint64_t seed, const std::string& scheme) {
  const py::buffer_info b = out.request(/*writable=*/true);
  if (b.format != py::format_descriptor<float>::format()) {
    throw py::value_error("init_parameter: '" + name + "' is not a float32 buffer (format " + b.format + ")");
  }
  spec::ParamSpec p{name, std::vector<int64_t>(b.shape.begin(), b.shape.end())};
  py::ssize_t stride = sizeof(float);
  for (size_t d = b.shape.size(); d-- > 0;) {
    if (b.shape[d] > 1 && b.strides[d] != stride) {
      throw py::value_error("init_parameter: '" + name + "' is not C-contiguous");
    }
    stride *= b.shape[d];
  }
  const auto init = model::parse_init_scheme(scheme);
  py::gil_scoped_release release;
  model::init_parameter_range(p, seed, 0, p.numel(), static_cast<float*>(b.ptr), init);
}

}  // namespace

void bind_train(py::module_& m) {
  py::register_exception<train::ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::class_<JobConfig>(m, "TrainConfig")
      .def(py::init<const std::vector<std::string>&, int64_t>(), py::arg("argv"), py::arg("world_size"))
      .def_readonly("help", &JobConfig::help)
      .def_readonly("print_config", &JobConfig::print_config)
      .def_static("usage", [] { return train::train_config_usage("python3 -m fsdp_runtime.train"); })
      // Every key, resolved (degrees, global batch, accumulation steps), as TOML: train.py reads it with tomllib.
      .def("to_toml", [](const JobConfig& c) { return c.config.to_toml(); })
      .def("no_effect_line", [](const JobConfig& c) { return c.config.no_effect_line(); })
      .def("check_fits_machine_memory", [](const JobConfig& c) { c.config.check_fits_machine_memory(); })
      .def("model", &model_dims)
      // What transformer block `layer` (0-based) does under activation_checkpoint (spec::block_ac, the
      // rule fsdp-train's blocks follow): "none", "selective" (the op-level policy) or "full".
      .def("block_ac", [](const JobConfig& c,
                          int64_t layer) { return std::string(spec::name(spec::block_ac(c.config.policy(), layer))); })
      .def("lr", [](const JobConfig& c, int64_t step) { return c.config.lr_schedule().at(step); })
      .def("resolve_path", [](const JobConfig& c, const std::string& p) { return c.config.resolve_path(p); })
      .def("mesh", [](const JobConfig& c) {
        const auto& mesh = c.config.mesh();
        return py::make_tuple(mesh.replicate_degree(), mesh.shard_degree());
      });
  py::class_<JobData>(m, "DataLoader")
      .def(py::init<const JobConfig&, int>(), py::arg("config"), py::arg("rank"))
      .def("next", &JobData::next);
  py::class_<JobMetrics>(m, "MetricsLogger")
      .def(py::init<const JobConfig&, int, bool>(), py::arg("config"), py::arg("rank"), py::arg("console"))
      .def("log", &JobMetrics::log, py::arg("step"), py::arg("loss"), py::arg("grad_norm"), py::arg("lr"),
           py::arg("tokens"), py::arg("seconds"), py::arg("memory_bytes"), py::arg("skipped") = false,
           py::arg("comm_hidden") = train::RunStep::kNone)
      .def("event", &JobMetrics::event, py::arg("kind"), py::arg("step"), py::arg("detail") = "")
      .def("report", &JobMetrics::report, py::arg("last") = false)
      .def("summary", &JobMetrics::summary);
  // model/blas_core.h: sets OPENBLAS_CORETYPE where OpenBLAS loaded kernels older than this CPU allows
  // (rank 0 says so) and returns it, for fsdp_runtime.use_best_blas_core to restart with; "" if none.
  m.def("prepare_blas_core_restart", [](const std::string& program) {
    return model::prepare_blas_core_restart(program, launch::environment_names_rank_zero());
  });
  // model/ops.h: the thread count of the OpenBLAS this process runs (torch's BLAS on Debian, the same
  // library); returns the count afterwards. fsdp_runtime.set_cpu_threads.
  m.def("set_blas_threads", [](int threads) {
    model::ops::set_blas_threads(threads);
    return model::ops::blas_threads();
  });
  // common/process_memory.h: the C library's heap keeps what a step frees (fully_shard's first call;
  // fsdp_runtime.keep_freed_heap). Returns whether it does.
  m.def("keep_freed_heap", &keep_freed_heap,
        "Makes the C library's heap keep what a training step frees for the next step (fully_shard calls it; "
        "call it for a plain torch model measured beside one). Returns whether it does: false under "
        "FSDP_CACHING_ALLOCATOR=0, without glibc, or under AddressSanitizer.");
  m.def("init_parameter", &init_parameter, py::arg("out"), py::arg("name"), py::arg("seed"), py::arg("scheme"));
  m.def("read_safetensors", &read_safetensors, py::arg("path"));
  m.def("write_safetensors", &write_safetensors, py::arg("path"), py::arg("tensors"),
        py::arg("metadata") = std::map<std::string, std::string>{});
}

}  // namespace fsdp::torch_backend
