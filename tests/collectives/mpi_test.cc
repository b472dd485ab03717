// The MPI transport in real mpirun jobs of fsdp-mpi-check (mpi_check.cc): every collective at 1 to 4
// ranks with payloads split over several MPI messages, size mismatches, a killed peer, and the
// errors outside an MPI job. mpirun is part of the build's requirements (the transport links MPI),
// so its absence fails these tests rather than skipping them.
#include <gtest/gtest.h>

#include <string>

#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

const std::string kCheck = FSDP_MPI_CHECK_BIN;
// Variables of a surrounding launcher would make the check join that job instead. Open MPI's own
// components leak at exit, which LeakSanitizer would count as a failure of every rank (the
// transport's memory is checked by the other collectives tests).
const std::string kClean =
    "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u PMI_SIZE "
    "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ";

bool have_mpirun() { return run_shell("command -v mpirun").code == 0; }

int count(const std::string& text, const std::string& needle) {
  int c = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++c;
  return c;
}

class MpiJobs : public ::testing::TestWithParam<int> {};

TEST_P(MpiJobs, EveryCollectiveMatchesReference) {
  ASSERT_TRUE(have_mpirun()) << "mpirun not found (apt-get install openmpi-bin)";
  const int n = GetParam();
  const ShellResult r = run_shell(kClean + kMpirunForTests + " -np " + std::to_string(n) + " " + kCheck + " suite");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < n; ++k) {
    const std::string ok = "fsdp-mpi-check OK: rank " + std::to_string(k) + "/" + std::to_string(n) + " mode suite";
    EXPECT_EQ(count(r.output, ok), 1) << ok << "\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpiJobs, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(MpiTransport, SizeMismatchAndSelfSend) {
  ASSERT_TRUE(have_mpirun()) << "mpirun not found (apt-get install openmpi-bin)";
  const ShellResult r = run_shell(kClean + kMpirunForTests + " -np 2 " + kCheck + " mismatch");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "mode mismatch"), 2) << r.output;
}

// The survivor names the dead rank within seconds. A shell around each rank reports its status: the
// dead rank never finalised MPI, so mpirun would otherwise end the survivor before it reports.
TEST(MpiFaults, KilledPeerIsReportedQuickly) {
  ASSERT_TRUE(have_mpirun()) << "mpirun not found (apt-get install openmpi-bin)";
  const ShellResult r = run_shell(kClean + kMpirunForTests + " -np 2 sh -c '" + kCheck +
                                  " kill; echo \"rank $OMPI_COMM_WORLD_RANK exit $?\"'");
  EXPECT_EQ(count(r.output, "rank 1 exit 137\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-mpi-check OK: rank 0/2 mode kill"), 1) << r.output;
  // mpirun may end the survivor after it reported and before its shell does (slow builds).
  EXPECT_EQ(count(r.output, "rank 0 exit "), count(r.output, "rank 0 exit 0\n")) << r.output;
  EXPECT_LT(r.seconds, 20) << r.output;
}

TEST(MpiFaults, OutsideAnMpiJobSaysSo) {
  const ShellResult r = run_shell(kClean + kCheck + " suite");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("start the program with mpirun"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fsdp::testing
