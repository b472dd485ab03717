// fsdp-plan: will the model fit, how to shard it, how fast a step will be. Prints the plan the runtime
// executes. Usage in docs/planner.md and --help.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/trace.h"
#include "sharding/auto_planner.h"
#include "sharding/plan_io.h"
#include "sharding/schedule_sim.h"
#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fs = fsdp::sharding;
namespace sp = fsdp::spec;

namespace {

constexpr int kExitPlanError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitDoesNotFit = 3;

constexpr const char* kUsage =
    R"(usage: fsdp-plan --model NAME|FILE.toml (--chip NAME | --chip-file FILE.toml) [options]

model and hardware
  --model NAME|FILE      preset (llama3-debug, debugmodel_byte, debugmodel_byte_moe, llama3-8b, llama3-70b, llama3-405b,
                         llama2-7b, llama2-13b, llama2-70b, mixtral-8x7b, qwen3-30b-a3b, deepseek-v2-lite) or TOML spec
  --chip NAME            chip profile (trn1, trn2, trn3, a100, h100, h100-hbm2e, h200, cpu)
  --chip-file FILE       TOML profile; overrides the --chip preset field by field
  --nodes N              servers (default 1)
  --chips-per-node N     chips per server, up to 144 (default: the chip's server size)
mesh and policy (plain plan)
  --shard N              shard degree (default: world / replicate)
  --replicate N          HSDP replicas (default 1)
  --ep N                 expert-parallel degree of a MoE model (parallelism.expert_parallel_degree): runs of N
                         shard ranks split the experts, each expert sharded over shard / N ranks (default 1;
                         with --auto: the only degree tried, else every divisor of the experts is searched)
  --param-dtype T        all-gather and compute dtype (default bf16)
  --reduce-dtype T       reduce-scatter dtype (default fp32)
  --param-comm P         what all-gathers carry: default (the param dtype) | mxfp8 (training.param_comm_dtype)
  --grad-comm P          what reduce-scatters carry: default (the reduce dtype) | mxfp8 (training.grad_comm_dtype)
  --loss L               the head's loss, for its memory: fused (the runtime's; default) | eager (PyTorch's
                         cross_entropy over fp32 logits: TorchTitan, the Python front end)
  --optimizer O          adamw | sgd (momentum) (default adamw)
  --redundancy R         none | buddy: price fault tolerance's buddy mirror (fault_tolerance.redundancy; default
                         none): each rank's copy of rank r+1's shard and optimizer state, its grad shard per step
  --reshard R            reshard after forward: true | false | group size (default true)
  --prefetch N           units all-gathered ahead (default 1)
  --ac MODE              activation checkpointing: none | selective:op | selective:K | full (default none;
                         selective alone is selective:op; K: every K-th block full)
  --micro-batch N        sequences per rank per micro-step (default 1)
  --seq-len N            tokens per sequence (default 8192)
  --global-batch N       sequences per optimizer step over all ranks (default world x micro-batch)
  --headroom F           fraction of memory kept free (default 0.1)
search
  --auto                 search shard/replicate, expert parallel, reshard, prefetch, ac and micro-batch for the
                         fastest fit
  --allow-mxfp8          let --auto also choose MXFP8 for the all-gathers and/or reduce-scatters where it is
                         faster (it changes the numerics: off unless asked)
  --top N                candidates to print (default 5)
output
  --params               list every parameter's layout in the table
  --json                 print the plan (or auto-plan report) as JSON instead of the table
  --text                 print it as protobuf text format
  --out FILE             write the plan as protobuf (text format when FILE ends in .txtpb or .pbtxt)
  --trace FILE           write the simulated step of one rank as a Chrome / Perfetto trace, in fsdp-train
                         --trace's format (plain plans only)
  --list-models, --list-chips, --help
exit status: 0 planned and fits, 1 bad input, 2 bad usage, 3 planned but does not fit
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_int(const std::string& flag, const std::string& v) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size()) {
    throw UsageError(flag + " expects an integer, got '" + v + "'");
  }
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw UsageError(flag + " expects a number, got '" + v + "'");
}

fsdp::DataType parse_dtype(const std::string& flag, const std::string& v) {
  auto t = fsdp::parse_data_type(v);
  if (!t || !fsdp::is_floating(*t)) throw UsageError(flag + ": unknown floating dtype '" + v + "'");
  return *t;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The simulated step (sharding/schedule_sim.h) as fsdp-train names its spans: "forward <unit>",
// "all_gather <unit>", ...; the previous step's optimizer is left out, the gathers it started are cut
// at the step's start. The bytes live are a counter track, "memory (predicted)".
void write_predicted_trace(const fs::Plan& plan, const std::string& path) {
  using fsdp::Track;
  const fs::StepSimulation sim = fs::simulate_step(plan.schedule, {plan.chip.comm_compute_contention, true});
  fsdp::Trace trace(0);
  for (const auto& span : sim.spans) {
    const double end = span.start + span.duration;
    if (end <= 0) continue;
    std::string what(fs::name(span.kind));
    if (span.unit >= 0) what += " " + plan.rank_model.units[static_cast<size_t>(span.unit)].name;
    const double start = std::max(0.0, span.start);
    trace.complete(fs::is_communication(span.kind) ? Track::kCommunication : Track::kCompute, what, start * 1e6,
                   (end - start) * 1e6, span.bytes);
  }
  // Bytes live over the step (the planner's memory model, moment by moment), from the last value before it.
  int64_t before = -1;
  for (const auto& m : sim.memory) {
    if (m.time < 0) {
      before = m.bytes;
      continue;
    }
    if (before >= 0) trace.counter("memory (predicted)", 0, before);
    before = -1;
    trace.counter("memory (predicted)", m.time * 1e6, m.bytes);
  }
  try {
    trace.write(path);
  } catch (const std::runtime_error& e) {
    throw sp::SpecError(e.what());
  }
}

// The command line: flags with a value in `v`, switches in `b`.
struct Args {
  std::map<std::string, std::string> v;
  std::map<std::string, bool> b;
};

Args parse_args(int argc, char** argv) {
  static const std::vector<std::string> kValueFlags = {
      "--model",     "--chip",         "--chip-file", "--nodes",       "--chips-per-node",
      "--shard",     "--replicate",    "--ep",        "--param-dtype", "--reduce-dtype",
      "--optimizer", "--reshard",      "--prefetch",  "--ac",          "--micro-batch",
      "--seq-len",   "--global-batch", "--headroom",  "--top",         "--out",
      "--trace",     "--param-comm",   "--grad-comm", "--loss",        "--redundancy"};
  static const std::vector<std::string> kBoolFlags = {"--auto",        "--params",     "--json", "--text",
                                                      "--list-models", "--list-chips", "--help", "-h",
                                                      "--allow-mxfp8"};
  Args args;
  auto& v = args.v;
  auto& b = args.b;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (std::find(kBoolFlags.begin(), kBoolFlags.end(), arg) != kBoolFlags.end()) {
      if (has_value) throw UsageError(arg + " takes no value");
      b[arg] = true;
    } else if (std::find(kValueFlags.begin(), kValueFlags.end(), arg) != kValueFlags.end()) {
      if (!has_value) {
        if (i + 1 >= argc) throw UsageError(arg + " needs a value");
        value = argv[++i];
      }
      v[arg] = value;
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  return args;
}

// --list-models / --list-chips: the presets, a line each.
void list_presets(bool models, bool chips) {
  if (models) {
    for (const auto& n : sp::model_preset_names()) {
      const auto m = sp::model_preset(n);
      std::printf("%-14s %16lld params  %zu units\n", n.c_str(), static_cast<long long>(m.num_params()),
                  m.units.size());
    }
  }
  if (chips) {
    for (const auto& n : fs::chip_preset_names()) {
      const auto c = fs::chip_preset(n);
      std::printf("%-6s %7.1f GiB  %5.2f TB/s HBM  bf16 %7.1f TFLOP/s  fp8 %7.1f TFLOP/s  %3lld chips/server\n",
                  n.c_str(), c.memory_bytes / (1024.0 * 1024 * 1024), c.hbm_bytes_per_s / 1e12,
                  c.peak_flops_bf16 / 1e12, c.peak_flops_fp8 / 1e12, static_cast<long long>(c.chips_per_node));
    }
  }
}

// The policy the flags give (the planner's defaults elsewhere).
sp::Policy policy_from(Args& args) {
  auto& v = args.v;
  auto& b = args.b;
  sp::Policy policy;
  if (v.count("--param-dtype")) policy.param_dtype = parse_dtype("--param-dtype", v["--param-dtype"]);
  if (v.count("--reduce-dtype")) policy.reduce_dtype = parse_dtype("--reduce-dtype", v["--reduce-dtype"]);
  if (v.count("--param-comm")) policy.param_comm = sp::parse_comm_precision(v["--param-comm"]);
  if (v.count("--grad-comm")) policy.grad_comm = sp::parse_comm_precision(v["--grad-comm"]);
  if (v.count("--loss")) policy.loss = sp::parse_loss(v["--loss"]);
  if (v.count("--redundancy")) policy.redundancy = sp::parse_redundancy(v["--redundancy"]);
  if (policy.redundancy != sp::Redundancy::kNone && b["--auto"]) {
    throw UsageError("--redundancy prices a given plain FSDP mesh; it does not combine with --auto");
  }
  if (b["--allow-mxfp8"] && !b["--auto"]) throw UsageError("--allow-mxfp8 widens the --auto search; add --auto");
  if (v.count("--optimizer")) policy.optimizer = sp::parse_optimizer(v["--optimizer"]);
  if (v.count("--reshard")) policy.reshard = sp::Reshard::parse(v["--reshard"]);
  if (v.count("--prefetch")) policy.prefetch = parse_int("--prefetch", v["--prefetch"]);
  if (v.count("--ac")) sp::parse_ac(v["--ac"], policy);
  if (v.count("--micro-batch")) policy.micro_batch = parse_int("--micro-batch", v["--micro-batch"]);
  if (v.count("--seq-len")) policy.seq_len = parse_int("--seq-len", v["--seq-len"]);
  return policy;
}

// A plan's message, its table and whether it fits: what every output form is made from.
struct Output {
  std::unique_ptr<google::protobuf::Message> message;
  std::string table;
  bool fits = false;
};

// --auto: the search's candidates and, when one fits, its plan.
Output plan_auto(Args& args, const sp::ModelSpec& model, const fs::ChipProfile& chip, int64_t nodes, int64_t cpn,
                 double headroom, const sp::Policy& policy, int64_t global_batch) {
  auto& v = args.v;
  auto& b = args.b;
  Output o;
  if (v.count("--trace")) throw UsageError("--trace writes a plain plan's step; drop --auto");
  for (const char* f : {"--shard", "--replicate", "--reshard", "--prefetch", "--ac", "--micro-batch"}) {
    if (v.count(f)) throw UsageError(std::string(f) + " is searched by --auto; drop one of them");
  }
  for (const char* f : {"--param-comm", "--grad-comm"}) {
    if (b["--allow-mxfp8"] && v.count(f)) throw UsageError(std::string(f) + " is searched by --allow-mxfp8; drop one");
  }
  fs::AutoPlanOptions options;
  options.nodes = nodes;
  options.chips_per_node = cpn;
  options.global_batch = global_batch;
  options.headroom = headroom;
  options.base = policy;
  options.allow_mxfp8 = b["--allow-mxfp8"];
  if (v.count("--ep")) options.expert_parallel_choices = {parse_int("--ep", v["--ep"])};
  if (v.count("--top")) options.top = static_cast<size_t>(std::max<int64_t>(1, parse_int("--top", v["--top"])));
  const fs::AutoPlanResult result = fs::auto_plan(model, chip, options);
  auto report = std::make_unique<fsdp::proto::AutoPlanReport>(fs::to_proto(result));
  o.table = fs::format_candidates(*report);
  if (report->found()) o.table += "\n" + fs::format_plan(report->best(), b["--params"]);
  o.fits = report->found();
  o.message = std::move(report);
  return o;
}

// A plain plan of the mesh the flags give.
Output plan_one(Args& args, const sp::ModelSpec& model, const fs::ChipProfile& chip, int64_t nodes, int64_t cpn,
                double headroom, sp::Policy policy, int64_t global_batch) {
  auto& v = args.v;
  auto& b = args.b;
  Output o;
  // Unset degrees: one replica (--shard alone: the replicas fill the rest), the shard group the rest.
  sp::MeshSpec spec{
      nodes, cpn,
      v.count("--replicate") ? parse_int("--replicate", v["--replicate"]) : (v.count("--shard") ? sp::kRestOfWorld : 1),
      v.count("--shard") ? parse_int("--shard", v["--shard"]) : sp::kRestOfWorld};
  if (v.count("--ep")) spec.expert_parallel = parse_int("--ep", v["--ep"]);
  if ((v.count("--replicate") && spec.replicate <= 0) || (v.count("--shard") && spec.shard <= 0)) {
    throw sp::SpecError("mesh: replicate and shard degrees must be >= 1");
  }
  const sp::Mesh mesh = sp::Mesh::create(spec);
  sp::JobSpec job{model, policy, mesh};
  // --redundancy buddy prices what [fault_tolerance] enable = true keeps (its rules checked with the job's).
  job.fault_tolerance.enable = policy.redundancy != sp::Redundancy::kNone;
  job.fault_tolerance.redundancy = policy.redundancy;
  sp::validate(job);
  if (global_batch > 0) policy.grad_accum = fs::grad_accum_for(global_batch, mesh.world_size(), policy.micro_batch);
  const fs::Plan plan = fs::make_plan(model, chip, mesh, policy, headroom);
  if (v.count("--trace")) write_predicted_trace(plan, v["--trace"]);
  auto proto = std::make_unique<fsdp::proto::ShardingPlan>(fs::to_proto(plan));
  o.table = fs::format_plan(*proto, b["--params"]);
  o.fits = proto->memory().fits();
  o.message = std::move(proto);
  return o;
}

int run(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  auto& v = args.v;
  auto& b = args.b;
  if (b["--help"] || b["-h"]) {
    std::cout << kUsage;
    return 0;
  }
  if (b["--list-models"] || b["--list-chips"]) {
    list_presets(b["--list-models"], b["--list-chips"]);
    return 0;
  }
  if (!v.count("--model")) throw UsageError("--model is required");
  if (!v.count("--chip") && !v.count("--chip-file")) throw UsageError("--chip or --chip-file is required");
  if (b["--json"] && b["--text"]) throw UsageError("--json and --text are exclusive");

  const sp::ModelSpec model = sp::resolve_model(v["--model"]);
  const fs::ChipProfile chip = v.count("--chip-file")
                                   ? fs::load_chip_profile_file(v["--chip-file"], v.count("--chip") ? v["--chip"] : "")
                                   : fs::chip_preset(v["--chip"]);
  const int64_t nodes = v.count("--nodes") ? parse_int("--nodes", v["--nodes"]) : 1;
  const int64_t cpn =
      v.count("--chips-per-node") ? parse_int("--chips-per-node", v["--chips-per-node"]) : chip.chips_per_node;
  const double headroom = v.count("--headroom") ? parse_double("--headroom", v["--headroom"]) : fs::kDefaultHeadroom;

  const sp::Policy policy = policy_from(args);
  const int64_t global_batch = v.count("--global-batch") ? parse_int("--global-batch", v["--global-batch"]) : 0;
  if (v.count("--global-batch") && global_batch <= 0) {
    throw sp::SpecError("global batch must be >= 1 (got " + std::to_string(global_batch) + ")");
  }
  if (b["--auto"]) sp::validate(policy, 1);  // the search picks the mesh; a plain plan checks the whole job below

  const Output o = b["--auto"] ? plan_auto(args, model, chip, nodes, cpn, headroom, policy, global_batch)
                               : plan_one(args, model, chip, nodes, cpn, headroom, policy, global_batch);
  const auto& message = o.message;

  if (b["--json"]) {
    std::cout << fs::to_json(*message);
  } else if (b["--text"]) {
    std::cout << fs::to_text(*message);
  } else {
    std::cout << o.table;
  }
  if (v.count("--out")) {
    const std::string& path = v["--out"];
    const bool text = ends_with(path, ".txtpb") || ends_with(path, ".pbtxt");
    std::ofstream out(path, std::ios::binary);
    if (!out) throw sp::SpecError("cannot write '" + path + "'");
    out << (text ? fs::to_text(*message) : fs::to_binary(*message));
    if (!out) throw sp::SpecError("writing '" + path + "' failed");
  }
  return o.fits ? 0 : kExitDoesNotFit;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n\n" << kUsage;
    return kExitUsage;
  } catch (const sp::SpecError& e) {
    std::cerr << "fsdp-plan: error: " << e.what() << "\n";
    return kExitPlanError;
  }
}
