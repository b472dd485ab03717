#include "train/train_job.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/fault_injection.h"
#include "common/host_memory.h"
#include "common/output_files.h"
#include "common/process_memory.h"
#include "common/trace.h"
#include "proto/plan.pb.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/training_state.h"
#include "runtime/overlap.h"
#include "runtime/plan_check.h"
#include "sharding/chip_profile.h"
#include "sharding/cost_model.h"
#include "sharding/planner.h"
#include "train/config_paths.h"
#include "train/data_setup.h"
#include "train/dataset.h"
#include "train/job_announce.h"
#include "train/job_batches.h"
#include "train/job_grow.h"
#include "train/job_observers.h"
#include "train/job_output.h"
#include "train/job_recovery.h"
#include "train/job_restart.h"
#include "train/metrics.h"
#include "train/run_report.h"

namespace fsdp::train {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The loader's position as the checkpoint's data-loader entry; its decoding and checks are the
// checkpoint layer's (training_state.h), so the loader and `fsdp-ckpt verify` refuse the same entries.
std::string encode_state(const DataLoaderState& s) {
  return runtime::checkpoint::encode_loader_position(
      {s.step, s.micro_step, s.stream.token, s.stream.document, s.stream.offset});
}

DataLoaderState decode_state(const std::string& bytes, const std::string& dir) {
  const auto p = runtime::checkpoint::decode_loader_position(bytes, dir + ": ");
  return DataLoaderState{p.step, p.micro_step, StreamPosition{p.token, p.document, p.offset}};
}

using runtime::checkpoint::kDataLoaderKey;
constexpr const char* kLrSchedulerKey = "lr_scheduler";

// The LR schedule as text: a resumed run must continue the same curve (it is a function of the step).
std::string describe_schedule(const runtime::LrSchedule& lr) {
  std::ostringstream s;
  s.precision(17);
  s << "lr=" << lr.lr << " warmup_steps=" << lr.warmup_steps << " total_steps=" << lr.total_steps
    << " decay_steps=" << lr.decay_steps << " decay=" << static_cast<int>(lr.decay) << " min_lr_factor=" << lr.min_lr_factor;
  return s.str();
}

// What a resume needs beyond the shards: where the data loader is, the schedule and the RNG. The data is
// a pure function of (seed, step, micro-step, rank) and initialisation happens once, so the RNG state is
// the seed and the loader's position.
constexpr const char* kDataSourceKey = "data_source";

// What the data loader's position is a position in: the data set, its size and the tokenizer.
std::string describe_data(const TokenSource& source, const std::shared_ptr<const BpeTokenizer>& tokenizer) {
  std::string d(source.name());
  if (const auto* text = dynamic_cast<const TextStreamSource*>(&source)) d += " documents=" + std::to_string(text->documents());
  return d + " tokenizer=" + (tokenizer ? tokenizer->describe() : "bytes");
}

runtime::checkpoint::TrainingState training_state(const DataLoaderState& loader, const TrainerOptions& trainer, int64_t step,
                                                  const std::string& data_source) {
  return {{kDataLoaderKey, encode_state(loader)},
          {kDataSourceKey, data_source},
          {kLrSchedulerKey, describe_schedule(trainer.lr)},
          {"lr_scheduler_step", std::to_string(step)},
          {"rng", "counter-based data order: seed=" + std::to_string(trainer.seed) + " step=" + std::to_string(loader.step) +
                      " micro_step=" + std::to_string(loader.micro_step)},
          {"seed", std::to_string(trainer.seed)}};
}

// A changed schedule (more steps, another peak) is allowed, as in TorchTitan, but it bends every later
// step's learning rate: say so. Empty when unchanged.
std::string lr_schedule_warning(const runtime::checkpoint::TrainingState& state, const runtime::LrSchedule& lr,
                                const std::string& dir) {
  const auto it = state.find(kLrSchedulerKey);
  if (it == state.end() || it->second == describe_schedule(lr)) return {};
  return "warning: checkpoint " + dir + " was saved with LR schedule '" + it->second + "', this run uses '" +
         describe_schedule(lr) + "': later learning rates differ from the saved run's";
}

// The planner's view of this run, for the predicted peak printed beside the measured one.
int64_t planned_peak(const TrainerOptions& trainer) {
  return sharding::make_plan(trainer.model, sharding::chip_preset("cpu"), *trainer.fsdp.mesh, trainer.fsdp.policy, 0.0)
      .estimate.memory.peak();
}

// Every rank's text, on rank 0 (empty elsewhere): a size, then the bytes, from each rank in turn.
std::vector<std::string> gather_strings_to_rank0(Communicator& world, const std::string& mine) {
  if (world.rank() != 0) {
    const int64_t size = static_cast<int64_t>(mine.size());
    world.send(&size, 1, DataType::kInt64, 0).wait();
    world.send(mine.data(), mine.size(), DataType::kUint8, 0).wait();
    return {};
  }
  std::vector<std::string> all{mine};
  for (int r = 1; r < world.size(); ++r) {
    int64_t size = 0;
    world.recv(&size, 1, DataType::kInt64, r).wait();
    std::string text(static_cast<size_t>(size), '\0');
    world.recv(text.data(), text.size(), DataType::kUint8, r).wait();
    all.push_back(std::move(text));
  }
  return all;
}

}  // namespace

TrainerOptions trainer_options(const TrainConfig& c) {
  TrainerOptions trainer;
  trainer.init = model::parse_init_scheme(c.model.init_scheme);
  trainer.max_norm = c.training.max_norm;
  spec::JobSpec job = c.job_spec();
  trainer.model = std::move(job.model);
  trainer.fsdp.mesh = job.mesh;
  trainer.fsdp.policy = job.policy;
  trainer.adamw = runtime::AdamWConfig{c.optimizer.beta1, c.optimizer.beta2, c.optimizer.eps, c.optimizer.weight_decay};
  trainer.sgd = runtime::SgdConfig{c.optimizer.momentum, c.optimizer.weight_decay};
  trainer.lr = c.lr_schedule();
  trainer.seed = static_cast<uint64_t>(c.training.seed);
  trainer.skip_nonfinite = c.training.skip_nonfinite_steps;
  return trainer;
}

DataLoaderOptions data_loader_options(const TrainConfig& c, int rank) {
  DataLoaderOptions o;
  o.local_batch_size = c.training.local_batch_size;
  o.seq_len = c.training.seq_len;
  o.gradient_accumulation_steps = c.training.gradient_accumulation_steps;
  o.dp_rank = c.mesh().data_parallel_rank(rank);
  o.dp_size = c.mesh().data_parallel_size();
  o.seed = static_cast<uint64_t>(c.training.seed);
  return o;
}

MetricsOptions job_metrics_options(const TrainConfig& c, int rank, std::ostream* log) {
  const sharding::ChipProfile chip = sharding::chip_preset("cpu");
  MetricsOptions o;
  o.rank = rank;
  o.log_freq = c.metrics.log_freq;
  o.flops_per_token = sharding::model_flops_per_token(c.model_spec(), c.training.seq_len);
  o.peak_flops = chip.peak_flops(DataType::kFloat32);
  o.memory_capacity_bytes = static_cast<double>(job_memory_capacity(chip).bytes);
  if (!c.metrics.file.empty() && (rank == 0 || c.metrics.save_for_all_ranks)) {
    o.file = c.metrics.save_for_all_ranks ? metrics_file_for_rank(c.metrics_path(), rank) : c.metrics_path();
  }
  o.out = log;
  o.print = log != nullptr && (rank == 0 || c.metrics.save_for_all_ranks);
  o.planned_memory_bytes = planned_peak(trainer_options(c));  // the report draws it beside the measured peak
  return o;
}

std::string model_config_hash(const TrainConfig& config) {
  const auto spec = config.model_spec();
  std::ostringstream s;
  s << "llama dim=" << spec.dims.dim << " layers=" << spec.dims.layers << " heads=" << spec.dims.n_heads
    << " kv=" << spec.dims.n_kv_heads << " ffn=" << spec.dims.ffn_hidden << " vocab=" << spec.dims.vocab
    << " eps=" << config.model.norm_eps << " theta=" << config.model.rope_theta;
  if (config.model.rope_scaling) {
    s << " rope_scaling=" << config.model.rope_scaling_factor << "," << config.model.rope_low_freq_factor << ","
      << config.model.rope_high_freq_factor << "," << config.model.rope_original_max_position_embeddings;
  }
  for (const auto& u : spec.units) {
    for (const auto& p : u.params) {
      s << ' ' << p.name << '[';
      for (int64_t d : p.shape) s << d << ',';
      s << ']';
    }
  }
  std::ostringstream out;
  out << std::hex << fnv1a(s.str());
  return out.str();
}

namespace {

// How weights lie in a safetensors file this job reads or writes.
runtime::checkpoint::SafetensorsFormat weights_format(const TrainerOptions& opts, bool hf, DataType dtype) {
  runtime::checkpoint::SafetensorsFormat f;
  f.dtype = dtype == DataType::kBfloat16 ? "BF16" : dtype == DataType::kFloat16 ? "F16" : "F32";
  if (hf) f.hf = runtime::checkpoint::HfLlamaHeads{opts.model.dims.n_heads, opts.model.dims.n_kv_heads};
  return f;
}

// Where the model-only last save goes when it is a safetensors file (export_dtype other than float32,
// or last_save_in_hf): step-<N>/model.safetensors in the checkpoint folder; "" when it is a step
// directory like the others.
std::string last_save_safetensors_file(const TrainConfig& config) {
  const auto& ck = config.checkpoint;
  if (!ck.last_save_model_only || (ck.export_dtype == DataType::kFloat32 && !ck.last_save_in_hf)) return {};
  return config.checkpoint_dir() + "/" + runtime::checkpoint::step_dir_name(config.training.steps) + "/model.safetensors";
}

// The save after the last step with last_save_model_only (TorchTitan's _save_last_step): the weights
// only, as a step directory without optimizer state in fp32, else as step-<N>/model.safetensors in
// export_dtype and (last_save_in_hf) Hugging Face names.
void save_last_weights(const TrainConfig& config, const TrainerOptions& opts, runtime::checkpoint::Checkpointer& ckpt,
                       runtime::FsdpModel& model, int64_t step, const std::string& hash) {
  const auto& ck = config.checkpoint;
  const std::string file = last_save_safetensors_file(config);
  if (file.empty()) {
    ckpt.save(step, hash, {}, /*model_only=*/true);
    return;
  }
  ckpt.wait();
  runtime::checkpoint::export_safetensors(model, ckpt.comm(), file, {{"format", "pt"}, {"step", std::to_string(step)}},
                                          weights_format(opts, ck.last_save_in_hf, ck.export_dtype));
}

// The save after step `step` (every interval, and the last): the weights only as TorchTitan's
// last_save_model_only asks, else the whole state.
void save_checkpoint(const TrainConfig& config, const TrainerOptions& opts, runtime::checkpoint::Checkpointer& ckpt,
                     runtime::FsdpModel& model, const runtime::checkpoint::TrainingState& state, int64_t step,
                     const std::string& hash) {
  if (step == config.training.steps && config.checkpoint.last_save_model_only) {
    save_last_weights(config, opts, ckpt, model, step, hash);
  } else {
    ckpt.save(step, hash, state);
  }
}

// The step's hidden share of communication (metrics.jsonl's comm_hidden); NaN when no collective flew.
double hidden_share(const runtime::OverlapMeter& step) {
  const runtime::OverlapMeter::Share all = step.total();
  return all.seconds > 0 ? all.hidden_fraction() : RunStep::kNone;
}

// The checkpointer of `trainer`'s shards over `world`, as the [checkpoint] keys say.
std::unique_ptr<runtime::checkpoint::Checkpointer> make_checkpointer(const TrainConfig& config, Trainer& trainer,
                                                                     Communicator& world) {
  runtime::checkpoint::CheckpointOptions options;
  options.folder = config.checkpoint_dir();
  options.keep_latest_k = config.checkpoint.keep_latest_k;
  options.async = config.checkpoint.async_mode == "async";
  return std::make_unique<runtime::checkpoint::Checkpointer>(trainer.fsdp(), &trainer.optimizer(), world, options,
                                                             trainer.tracker());
}

// Checkpoints: resume from our own folder's latest (or load_step), else load another run's weights
// (initial_load_path), else start fresh; refuses a folder this run would overwrite. Sets the trainer's
// step and the loader's position, and result.start_step.
std::unique_ptr<runtime::checkpoint::Checkpointer> open_checkpoints(
    const TrainConfig& config, const TrainerOptions& opts, Trainer& trainer, Communicator& world, DataLoader& loader,
    const std::string& data_source, const std::string& hash, const JobOptions& job, JobResult& result) {
  auto ckpt = make_checkpointer(config, trainer, world);
  const runtime::checkpoint::CheckpointOptions& checkpoint_options = ckpt->options();
  // Our own folder first (a restarted job), else another run's (initial_load_path), else a fresh start.
  const auto own_latest = runtime::checkpoint::latest_step(checkpoint_options.folder);
  const std::string& initial = config.checkpoint.initial_load_path;
  std::optional<runtime::checkpoint::LoadResult> loaded;
  const auto& ck = config.checkpoint;
  if (own_latest || (initial.empty() && ck.load_step >= 0)) {
    loaded = ckpt->load(hash, ck.load_step);
  } else if (!initial.empty()) {
    // TorchTitan's initial load: the weights only (step 0, fresh optimizer and data position) unless
    // initial_load_model_only = false.
    std::string from;
    if (const auto files = initial_safetensors_files(ck); !files.empty()) {
      runtime::checkpoint::import_safetensors(trainer.fsdp(), ckpt->comm(), files,
                                              weights_format(opts, ck.initial_load_in_hf, DataType::kFloat32));
      from = initial + (files.size() > 1 ? " (" + std::to_string(files.size()) + " files)" : "");
    } else if (ck.initial_load_model_only) {
      from = ckpt->load_model(initial, ck.load_step).dir;
    } else {
      loaded = ckpt->load_from(initial, hash, ck.load_step);
    }
    if (job.log && !from.empty())
      *job.log << "loaded the weights of " << from << " (model only: step 0, fresh optimizer)\n";
  }
  if (loaded) {
    const auto it = loaded->training_state.find(kDataLoaderKey);
    if (it == loaded->training_state.end()) {
      throw runtime::checkpoint::CheckpointError("checkpoint " + loaded->dir + " has no " + kDataLoaderKey + " state");
    }
    loader.restore(decode_state(it->second, loaded->dir));
    const std::string warning = lr_schedule_warning(loaded->training_state, opts.lr, loaded->dir);
    if (job.log && !warning.empty()) *job.log << warning << "\n";
    // Another data set or tokenizer is allowed, but the saved position then means other tokens: say so.
    if (const auto data = loaded->training_state.find(kDataSourceKey);
        job.log && data != loaded->training_state.end() && data->second != data_source) {
      *job.log << "warning: checkpoint " << loaded->dir << " was saved reading '" << data->second
               << "', this run reads '" << data_source << "': the data does not continue where it stopped\n";
    }
    trainer.set_steps_done(loaded->step);
    result.start_step = loaded->step;
    if (job.log)
      *job.log << "resumed from " << loaded->dir << " (step " << loaded->step << ", saved at shard degree "
               << loaded->saved_shard_degree << " x replicate " << loaded->saved_replicate_degree << ")\n";
  }
  // A committed checkpoint (or last save) is never overwritten: refuse before training, not at the save.
  const std::string last_file = last_save_safetensors_file(config);
  if (!last_file.empty() && std::filesystem::exists(last_file)) {
    throw runtime::checkpoint::CheckpointError("checkpoint folder '" + checkpoint_options.folder + "' already holds " +
                                               last_file + ", the last save of this run; use a new checkpoint.folder");
  }
  for (int64_t s : runtime::checkpoint::committed_steps(checkpoint_options.folder)) {
    if (s > result.start_step && s <= config.training.steps) {
      throw runtime::checkpoint::CheckpointError(
          "checkpoint folder '" + checkpoint_options.folder + "' already holds " +
          runtime::checkpoint::step_dir_name(s) + ", after the step this run starts from (" +
          std::to_string(result.start_step) +
          "); continuing would overwrite it. Use a new checkpoint.folder with checkpoint.initial_load_path = '" +
          checkpoint_options.folder + "', checkpoint.load_step = " + std::to_string(result.start_step) +
          " and checkpoint.initial_load_model_only = false");
    }
  }
  return ckpt;
}

// Every rank's trace, merged into the one file rank 0 writes.
void write_merged_trace(const TrainConfig& config, Communicator& world, const Trace& trace, std::ostream* log) {
  const int rank = world.rank();
  // Over the communicator rather than through files, so ranks on other hosts land in the same file.
  const auto traces = gather_strings_to_rank0(world, trace.to_json());
  if (rank == 0) {
    std::vector<std::pair<std::string, std::string>> named;
    for (size_t r = 0; r < traces.size(); ++r) named.emplace_back("rank " + std::to_string(r), traces[r]);
    write_text_file(config.trace_path(), merge_trace_json(named));
    if (log) *log << "trace: " << config.trace_path() << " (" << traces.size() << " ranks)\n";
  }
}

// Rank 0's closing lines: memory against the planner, the block cache after warm-up, expert
// parallelism's all-to-all share, how much communication compute hid, and where the run report is.
void print_job_summary(std::ostream& log, const JobResult& result, bool has_steady_steps, int64_t expert_parallel,
                       const std::string& report) {
  log << "memory: peak " << result.peak_bytes << " B tracked, planner predicted " << result.planned_peak_bytes << " B ("
      << (result.planned_peak_bytes > 0 ? 100.0 * static_cast<double>(result.peak_bytes - result.planned_peak_bytes) /
                                              static_cast<double>(result.planned_peak_bytes)
                                        : 0.0)
      << "%), " << result.peak_reserved_bytes << " B reserved\n";
  if (has_steady_steps) {
    log << "memory: after the first step, " << result.steady_system_allocations << " blocks allocated and "
        << result.steady_system_frees << " freed by the block cache, " << result.page_faults_per_step
        << " minor page faults per step\n";
  }
  if (expert_parallel > 1 && result.seconds_per_step > 0) {
    log << "all-to-all: " << 1e3 * result.all_to_all_seconds_per_step << " ms per step, "
        << static_cast<int>(100 * result.all_to_all_seconds_per_step / result.seconds_per_step + 0.5)
        << "% of the step (blocking: the compute waits for it, none hidden)\n";
  }
  for (const auto& [kind, f] : result.hidden_fraction) {
    log << "overlap: " << kind << " " << static_cast<int>(f * 100 + 0.5) << "% hidden behind compute\n";
  }
  if (!report.empty()) log << "report: " << report << "\n";
}

// What the steps measured, on this rank: peaks against the planner, the block cache and page faults after
// warm-up, hidden communication, median step and all-to-all times (the first step left out).
void summarize_steps(Trainer& trainer, int64_t planned_peak_bytes, const runtime::OverlapMeter& overlap,
                     const BlockCacheStats& cache_after_warmup, int64_t faults_after_warmup,
                     std::vector<double>& step_seconds, std::vector<double>& all_to_all_per_step, JobResult& result) {
  result.peak_bytes = trainer.tracker().peak_total();
  result.planned_peak_bytes = planned_peak_bytes;
  const BlockCacheStats cache = trainer.tracker().cache().stats();
  result.peak_reserved_bytes = cache.peak_reserved_bytes;
  if (!step_seconds.empty()) {
    result.steady_system_allocations = cache.system_allocations - cache_after_warmup.system_allocations;
    result.steady_system_frees = cache.system_frees - cache_after_warmup.system_frees;
    result.page_faults_per_step =
        static_cast<double>(minor_page_faults() - faults_after_warmup) / static_cast<double>(step_seconds.size());
  }
  for (const auto& [kind, share] : overlap.shares()) result.hidden_fraction[kind] = share.hidden_fraction();
  if (!step_seconds.empty()) {
    std::nth_element(step_seconds.begin(), step_seconds.begin() + step_seconds.size() / 2, step_seconds.end());
    result.seconds_per_step = step_seconds[step_seconds.size() / 2];
    auto mid = all_to_all_per_step.begin() + static_cast<std::ptrdiff_t>(all_to_all_per_step.size() / 2);
    std::nth_element(all_to_all_per_step.begin(), mid, all_to_all_per_step.end());
    result.all_to_all_seconds_per_step = *mid;
  }
}

// The start-up lines naming the tokenizer and how the text is packed.
void log_data_source(std::ostream& log, const TrainConfig& config, const TokenSource& source, int64_t seq_len) {
  if (const auto tokenizer = job_tokenizer(config)) log << "tokenizer: " << tokenizer->describe() << "\n";
  if (const auto* text = dynamic_cast<const TextStreamSource*>(&source)) {
    log << "data: " << text->name() << ", " << text->documents() << " documents, packed into windows of " << seq_len + 1
        << " tokens\n";
  }
}

// Before the world changes: a save in flight finishes or fails (uncommitted if a lost rank never finished it).
void drop_checkpointer(std::unique_ptr<runtime::checkpoint::Checkpointer>& ckpt) {
  try {
    if (ckpt) ckpt->wait();
  } catch (const std::exception&) {
  }
  ckpt.reset();
}

// A step that failed on a lost member, under fault_tolerance.enable: the survivors' trainer replaces the
// old one (train/job_recovery.h), the checkpointer follows it to the new world, and the recovery is said on
// the console, in metrics.jsonl and in the trace once the first step after it finished (`recovered` holds it
// until then; one still held, a failure in the redone step, is said now, after the takeover of rank 0's output).
void recover(const TrainConfig& config, const JobOptions& job, const TrainerOptions& opts, JobBatches& data,
             std::unique_ptr<Trainer>& trainer, std::unique_ptr<runtime::checkpoint::Checkpointer>& ckpt,
             JobObservers& observers, JobOutput& out, Clock::time_point step_start, const std::string& why,
             std::optional<RecoveryRecord>& recovered) {
  drop_checkpointer(ckpt);
  RecoveryRecord record;
  record.detected = Clock::now();
  record.detected_into_step = std::chrono::duration<double>(record.detected - step_start).count();
  record.detected_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  trainer = recover_from_lost_rank(config, *job.elastic, std::move(trainer), opts, data.source(), why, record);
  observers.attach(*trainer);
  if (config.checkpoint.enable_checkpoint) ckpt = make_checkpointer(config, *trainer, job.elastic->comm());
  note_recovery(config, job, out, observers, std::move(record), recovered);
}

// Step s's checkpoint. A member lost during the save: recover, then save step s again at the new size.
void save_step(const TrainConfig& config, const JobOptions& job, const TrainerOptions& opts, JobBatches& data,
               std::unique_ptr<Trainer>& trainer, std::unique_ptr<runtime::checkpoint::Checkpointer>& ckpt,
               JobObservers& observers, JobOutput& out, std::optional<RecoveryRecord>& recovered, int64_t s,
               const std::string& hash, const std::string& data_source) {
  for (;;) {
    try {
      save_checkpoint(config, opts, *ckpt, trainer->fsdp(),
                      training_state(data.position_after(s), opts, s, data_source), s, hash);
      if (s == config.training.steps) ckpt->wait();  // an async last save's failure is recovered here too
    } catch (const CommError& e) {
      if (job.elastic == nullptr) throw;
      const std::string why = "in the checkpoint save of step " + std::to_string(s) + ": " + e.what();
      recover(config, job, opts, data, trainer, ckpt, observers, out, Clock::now(), why, recovered);
      recovered->failed_step = s;  // no step was interrupted: the save of step s was
      continue;
    }
    out.metrics->log_event({"checkpoint", s, runtime::checkpoint::step_dir_name(s)});
    refresh_run_report(*out.metrics, out.rank, out.log);  // a run that dies later keeps the page of this save
    return;
  }
}

// A newcomer waits (the step's commit said so; not after the last step): grow, the checkpointer follows; a
// rank lost during the grow makes it a recovery.
void grow_if_asked(const TrainConfig& config, const JobOptions& job, const TrainerOptions& opts, JobBatches& data,
                   std::unique_ptr<Trainer>& trainer, std::unique_ptr<runtime::checkpoint::Checkpointer>& ckpt,
                   JobObservers& observers, JobOutput& out, int64_t step, GrowOutcome& said) {
  if (job.elastic == nullptr || job.elastic->grow_ticket() == 0 || step >= config.training.steps) return;
  drop_checkpointer(ckpt);
  GrowOutcome g;
  trainer = grow_job(config, *job.elastic, std::move(trainer), opts, data.source(), g,
                     config.fault_tolerance.recovery_timeout);
  observers.attach(*trainer);
  if (config.checkpoint.enable_checkpoint) ckpt = make_checkpointer(config, *trainer, job.elastic->comm());
  if (g.grown) said.grown = std::move(g.grown);
  if (g.recovered) note_recovery(config, job, out, observers, std::move(*g.recovered), said.recovered);
}

// fault_tolerance's commit vote of each step, with its fault injection points (tests).
std::function<bool(int64_t)> commit_vote(launch::ElasticWorld* ew) {
  return [ew](int64_t step) {
    fault::point(fault::When::kBeforeVote, step);
    const bool committed = ew->commit(step);
    fault::point(fault::When::kAfterVote, step);
    return committed;
  };
}

}  // namespace

JobResult run_training_job(const TrainConfig& config, Communicator& world, const JobOptions& job) {
  check_paths(config);
  TrainerOptions opts = trainer_options(config);
  const int launched_rank = job.elastic ? job.elastic->original_rank() : world.rank();
  fault::arm(launched_rank);  // FSDP_FAULT_KILL_AFTER_STEP (tests): refused here when malformed
  if (job.elastic) opts.commit = commit_vote(job.elastic);
  if (!config.parallelism.plan_file.empty()) {
    opts.fsdp.plan = std::make_shared<const proto::ShardingPlan>(runtime::read_plan_file(config.parallelism.plan_file));
  }
  // The rank as launched: fault injection and file names keep it after a lost rank renumbers the world.
  const int rank = launched_rank;
  JobResult result;

  const auto source = make_job_token_source(config, opts.model.dims.vocab, opts.seed);
  const std::string data_source = describe_data(*source, job_tokenizer(config));
  if (job.log) log_data_source(*job.log, config, *source, opts.fsdp.policy.seq_len);
  JobBatches data(source, data_loader_options(config, rank));
  const bool newcomer = job.elastic && joined_as_newcomer(*job.elastic);  // state from the members; rank > 0
  GrowOutcome said;  // a grow or recovery, said once the first step after it is done
  auto trainer = newcomer ? join_job(config, *job.elastic, opts, data.source(), said)
                          : std::make_unique<Trainer>(opts, world, data.source());
  std::optional<GrowRecord>& grown = said.grown;
  std::optional<RecoveryRecord>& recovered = said.recovered;

  const bool tracing = !config.metrics.trace_file.empty();
  Trace trace(rank, tracing);
  runtime::OverlapMeter overlap, step_overlap;  // over the run after warm-up; over the step in hand
  JobObservers observers{tracing, trace, overlap, step_overlap};
  observers.attach(*trainer);
  std::vector<double> all_to_all_per_step;

  // Checkpoints: resume from the latest (or load_step), then save every interval and at the end.
  const std::string hash = model_config_hash(config);
  std::unique_ptr<runtime::checkpoint::Checkpointer> ckpt;
  if (config.checkpoint.enable_checkpoint && newcomer) ckpt = make_checkpointer(config, *trainer, job.elastic->comm());
  if (config.checkpoint.enable_checkpoint && !newcomer) {
    ckpt = open_checkpoints(config, opts, *trainer, world, data.own(), data_source, hash, job, result);
    trainer->sync_redundancy();  // the loaded shards into their mirrors
  }

  const int64_t output_rank = newcomer ? job.elastic->rank() : rank;
  const MetricsOptions metrics_options = job_metrics_options(config, output_rank, job.log);
  JobOutput out{job.log, std::make_unique<MetricsLogger>(metrics_options), output_rank};
  if (metrics_options.print) {
    *job.log << "memory: percentages are of " << job_memory_capacity(sharding::chip_preset("cpu")).describe() << "\n";
  }

  announce_restart(result.start_step, ckpt != nullptr, *out.metrics, job.log);  // after fsdp-run --max-restarts
  std::vector<double> step_seconds;
  BlockCacheStats cache_after_warmup;
  int64_t faults_after_warmup = 0;
  const int64_t first_step = trainer->steps_done() + 1;
  for (int64_t s = first_step; s <= config.training.steps; ++s) {
    if (s == first_step + 1) {  // leave the first (warm-up) step out
      overlap.clear();
      cache_after_warmup = trainer->tracker().cache().stats();
      faults_after_warmup = minor_page_faults();
    }
    const double all_to_all_before = observers.all_to_all_seconds;
    step_overlap.clear();
    StepStats st;
    const auto step_start = Clock::now();
    try {
      st = trainer->step();
      if (recovered) {
        recovered->first_step_seconds = st.seconds;
        announce_recovery(*recovered, job.elastic->rank(), out, observers);
        recovered.reset();
      }
      if (grown) announce_grow(grown, st.seconds, job.elastic->rank(), out, observers);
    } catch (const CommError& e) {
      if (job.elastic == nullptr) throw;
      recover(config, job, opts, data, trainer, ckpt, observers, out, step_start, e.what(), recovered);
      if (!recovered->kept_step) {
        s = recovered->resumed_after;  // the loop goes on with the interrupted step, redone
        continue;
      }
      st = *recovered->kept_step;  // kept: every member had voted for it
    }
    result.steps.push_back(st);
    if (result.steps.size() > 1) {
      step_seconds.push_back(st.seconds);
      all_to_all_per_step.push_back(observers.all_to_all_seconds - all_to_all_before);
    }
    out.log_step(StepRecord{st.step, st.loss, st.grad_norm, st.lr, st.tokens, st.seconds,
                            trainer->tracker().peak_total(), st.skipped, hidden_share(step_overlap)});
    if (ckpt && (s == config.training.steps || s % config.checkpoint.interval == 0)) {
      save_step(config, job, opts, data, trainer, ckpt, observers, out, recovered, s, hash, data_source);
    }
    if (job.stop_after_step > 0 && s >= job.stop_after_step) break;
    kill_self_if_due(s, ckpt.get());  // fault injection (tests): FSDP_FAULT_KILL_AFTER_STEP
    grow_if_asked(config, job, opts, data, trainer, ckpt, observers, out, s, said);
  }
  if (recovered) announce_recovery(*recovered, job.elastic->rank(), out, observers);  // no step came after it
  if (job.elastic && job.elastic->rank() == 0) job.elastic->mark_finished();          // newcomers still waiting exit
  if (ckpt) ckpt->wait();

  summarize_steps(*trainer, metrics_options.planned_memory_bytes, overlap, cache_after_warmup, faults_after_warmup,
                  step_seconds, all_to_all_per_step, result);
  Communicator& last_world = job.elastic ? job.elastic->comm() : world;
  if (job.gather_final_parameters) {
    for (int u = 0; u < trainer->fsdp().num_units(); ++u) {
      result.final_parameters.push_back(trainer->fsdp().gather_full_parameters(u));
    }
  }
  if (tracing) write_merged_trace(config, last_world, trace, out.log);
  const std::string report = refresh_run_report(*out.metrics, out.rank, out.log);
  if (out.log != nullptr && (job.log == nullptr || metrics_options.print)) {
    out.metrics->print_summary();
    print_job_summary(*out.log, result, !step_seconds.empty(), trainer->fsdp().expert_parallel(), report);
  }
  return result;
}

}  // namespace fsdp::train
