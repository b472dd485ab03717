// fsdp-train: the main job. Reads a TorchTitan-style TOML file plus `--section.key value` overrides,
// joins the job (torchrun / mpirun / Slurm variables, or the launch flags), and trains the reference
// Llama model with FSDP on every rank.
//
//   fsdp-run --nproc 2 -- fsdp-train --config configs/debug_model.toml --training.steps 20
//   mpirun -np 144 fsdp-train --config llama.toml
//
// Exit status: 0 done, 1 a runtime failure (communication, non-finite loss, checkpoint), 2 bad
// configuration or usage. Every failure line names this rank once the environment has named it.
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "collectives/core/flight_recorder.h"
#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "launch/bootstrap.h"
#include "launch/cli_flags.h"
#include "launch/elastic_world.h"
#include "launch/thread_budget.h"
#include "launch/world.h"
#include "model/blas_core.h"
#include "model/ops.h"
#include "runtime/plan_check.h"
#include "train/config.h"
#include "train/job_recovery.h"
#include "train/train_job.h"

namespace {

// `rank` < 0: the failure came before the environment named this process's rank, so no rank is named.
int fail(int rank, const char* kind, const std::exception& e, int code) {
  std::fflush(stdout);
  if (rank >= 0) {
    std::fprintf(stderr, "fsdp-train: rank %d: %s: %s\n", rank, kind, e.what());
  } else {
    std::fprintf(stderr, "fsdp-train: %s: %s\n", kind, e.what());
  }
  // A runtime failure: this rank's last collectives, for fsdp-flight (a rank that failed outside
  // communication has no failed operation of its own to trigger the dump).
  if (code == 1) fsdp::FlightRecorder::instance().dump(std::string("fsdp-train failed: ") + kind + ": " + e.what());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // before anything else: it may restart this program
  fsdp::model::use_best_blas_core(argv, fsdp::launch::environment_names_rank_zero());
  using namespace fsdp;
  int rank = -1;  // unknown until the environment is read
  // Outside the try, so a failure is reported before the world is torn down (and never lost to it).
  std::optional<launch::World> world;
  std::unique_ptr<launch::ElasticWorld> elastic;  // fault_tolerance.enable: a world that shrinks
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    const launch::LaunchFlags flags = launch::take_launch_flags(args);
    std::vector<const char*> rest{argv[0]};
    for (const auto& a : args) rest.push_back(a.c_str());
    const train::CommandLine command_line = train::parse_command_line(static_cast<int>(rest.size()), rest.data());
    if (command_line.help) {
      std::cout << train::train_config_usage("fsdp-train") << '\n' << launch::launch_flags_usage();
      return 0;
    }
    const launch::ProcessEnv env = launch::detect_process_env(flags.overrides);
    rank = env.rank;
    // A replacement for a lost rank (fsdp-run --replace-lost, or by hand): it says nothing as rank 0.
    const bool joining = knobs::kFtJoin.get();
    const bool says = rank == 0 && !joining;
    train::TrainConfig config = train::load_train_config(command_line);
    if (command_line.print_config) {  // whether or not the data, tokenizer or memory are there
      config.resolve_keys(env.world_size);
      std::cout << "# fsdp-train configuration, resolved for " << env.world_size << " rank(s)\n"
                << config.to_toml() << "\n# environment knobs (docs/config.md)\n"
                << knobs::describe_knobs("# ");
      return 0;
    }
    config.validate(env.world_size);  // keys, every path and the memory fit: all mistakes, before anything starts
    // Flight recorder dumps go to the job's dump folder unless FSDP_FLIGHT_RECORDER_DIR chose.
    if (!knobs::kFlightRecorderDir.is_set()) FlightRecorder::instance().set_dump_dir(config.job.dump_folder);
    if (says) {
      if (const std::string line = config.no_effect_line(); !line.empty()) std::cout << "fsdp-train: " << line << '\n';
      if (config.job.print_config) std::cout << "# fsdp-train configuration\n" << config.to_toml() << '\n';
    }

    // Each rank's share of the cores unless the user chose (fsdp-run sets the variables for its ranks).
    const launch::ThreadBudget threads = launch::decide_thread_budget(
        launch::available_cores(), env.local_world_size, launch::user_set_thread_count());
    if (!threads.from_user) model::ops::set_blas_threads(threads.threads);
    if (says) std::cout << "fsdp-train: " << threads.describe << '\n';

    launch::WorldOptions world_options;
    if (!flags.transport.empty()) world_options.transport = flags.transport;
    if (joining && !config.fault_tolerance.enable) {
      throw InvalidArgument("FSDP_FT_JOIN=1 joins a running fault-tolerant job: set --fault_tolerance.enable true");
    } else if (joining) {
      std::cout << "fsdp-train: rank " << rank << " asks to join the running job (FSDP_FT_JOIN)\n" << std::flush;
      elastic = launch::ElasticWorld::join(env, world_options, world_options.rendezvous_timeout);
      if (!elastic) {
        std::cout << "fsdp-train: rank " << rank << ": the job finished before it admitted this rank\n";
        return 0;
      }
    } else if (config.fault_tolerance.enable) {
      elastic = std::make_unique<launch::ElasticWorld>(env, world_options);
    } else {
      world.emplace(launch::connect_world(env, world_options));
    }
    launch::World& first_world = elastic ? elastic->world() : *world;
    if (says) {
      std::cout << "fsdp-train: " << config.job.description << ": " << env.world_size << " rank(s) from " << env.source
                << " on " << first_world.topology.host_count << " host(s) over " << first_world.transport_name
                << ", shard " << config.parallelism.data_parallel_shard_degree << " x replicate "
                << config.parallelism.data_parallel_replicate_degree << ", " << config.training.steps << " steps\n"
                << std::flush;
    }
    train::JobOptions job;
    job.log = says || config.metrics.save_for_all_ranks ? &std::cout : nullptr;
    job.elastic = elastic.get();
    job.console = &std::cout;
    train::run_training_job(config, *first_world.comm, job);
    std::cout << std::flush;
    return 0;
  } catch (const train::ConfigError& e) {
    return fail(rank, "configuration", e, 2);
  } catch (const InvalidArgument& e) {
    return fail(rank, "invalid argument", e, 2);
  } catch (const runtime::PlanMismatch& e) {
    return fail(rank, "sharding plan", e, 2);
  } catch (const launch::Fenced& e) {
    return fail(rank, "fenced", e, 1);
  } catch (const train::RecoveryImpossible& e) {
    return fail(rank, "cannot recover in the job", e, 1);
  } catch (const train::NonFiniteLoss& e) {
    return fail(rank, "non-finite loss", e, 1);
  } catch (const std::exception& e) {
    return fail(rank, "error", e, 1);
  }
}
