// Start-up from the environment: every launcher's variables, their precedence, and bad values.
#include "launch/bootstrap.h"

#include <gtest/gtest.h>

#include <map>

#include "collectives/types/errors.h"

namespace fsdp::launch {
namespace {

EnvReader fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Bootstrap, NothingSetIsASingleProcess) {
  ProcessEnv p = detect_process_env({}, fake({}));
  EXPECT_EQ(p.source, "single");
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.local_world_size, 1);
}

TEST(Bootstrap, Torchrun) {
  ProcessEnv p = detect_process_env({}, fake({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                              {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.1.2.3"},
                                              {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(p.source, "torchrun");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(p.master_addr, "10.1.2.3");
  EXPECT_EQ(p.master_port, 29500);
}

TEST(Bootstrap, MpirunBeatsTheSlurmAllocationAroundIt) {
  ProcessEnv p = detect_process_env(
      {}, fake({{"OMPI_COMM_WORLD_RANK", "143"}, {"OMPI_COMM_WORLD_SIZE", "288"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "143"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "144"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(p.source, "mpirun");
  EXPECT_EQ(p.rank, 143);
  EXPECT_EQ(p.world_size, 288);
  EXPECT_EQ(p.local_world_size, 144);
}

TEST(Bootstrap, TorchrunBeatsMpirun) {
  ProcessEnv p = detect_process_env(
      {}, fake({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}));
  EXPECT_EQ(p.source, "torchrun");
  EXPECT_EQ(p.rank, 1);
}

TEST(Bootstrap, SlurmWithUnevenTasksPerNode) {
  ProcessEnv p = detect_process_env({}, fake({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                                              {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"FSDP_MASTER_ADDR", "n0"},
                                              {"MASTER_ADDR", "ignored"}, {"FSDP_MASTER_PORT", "7000"}}));
  EXPECT_EQ(p.source, "slurm");
  EXPECT_EQ(p.rank, 6);
  EXPECT_EQ(p.local_rank, 2);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(p.master_addr, "n0");
  EXPECT_EQ(p.master_port, 7000);
}

TEST(Bootstrap, OverridesWinAndSaySo) {
  BootstrapOverrides o;
  o.rank = 3;
  o.world_size = 4;
  o.master_port = 1234;
  ProcessEnv p = detect_process_env(o, fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(p.source, "override");
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.master_port, 1234);
}

void expect_rejected(const std::map<std::string, std::string>& vars, const std::string& needle) {
  try {
    detect_process_env({}, fake(vars));
    ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Bootstrap, BadValuesAreNamed) {
  expect_rejected({{"RANK", "2"}}, "RANK without WORLD_SIZE");
  expect_rejected({{"WORLD_SIZE", "2"}}, "WORLD_SIZE without RANK");
  expect_rejected({{"RANK", "two"}, {"WORLD_SIZE", "4"}}, "RANK='two'");
  expect_rejected({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "rank 4 is outside [0, 4) (from torchrun)");
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'");
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
                  "local rank 2 is outside [0, 2)");
  expect_rejected({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                  "local world size 3 must be in [1, 2]");
  expect_rejected({{"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'");
}

TEST(Bootstrap, RankZeroForStartUpLines) {
  EXPECT_TRUE(environment_names_rank_zero(fake({})));
  EXPECT_TRUE(environment_names_rank_zero(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}})));
  EXPECT_FALSE(environment_names_rank_zero(fake({{"RANK", "1"}, {"WORLD_SIZE", "2"}})));
  EXPECT_FALSE(environment_names_rank_zero(fake({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}})));
  EXPECT_TRUE(environment_names_rank_zero(fake({{"RANK", "x"}, {"WORLD_SIZE", "2"}})));  // reported later
}

}  // namespace
}  // namespace fsdp::launch
