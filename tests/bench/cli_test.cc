// fsdp-bench as users run it: under fsdp-run and under mpirun, every available backend, every type
// and op with -c 1, parsing the nccl-tests table it prints; the JSON it writes against the schema;
// bad flags; and fsdp-bench-report turning runs into the benchmarks page.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "bench/fsdp_bench/schema.h"
#include "tests/collectives/test_support.h"

namespace fsdp::bench {
namespace {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr
};

Result run(const std::string& command) {
  Result r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, got);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string bench() { return FSDP_BENCH_BIN; }
std::string under_fsdp_run(const std::string& args) {
  return std::string(FSDP_RUN_BIN) + " --nproc 2 --no-tag-output -- " + bench() + " " + args;
}
// Open MPI's components leak at MPI_Finalize from modules it has already unloaded (LeakSanitizer sees
// "<unknown module>", so no suppression can name them): leak checking is off for the ranks of an
// mpirun job, as in the other mpirun tests; fsdp-run jobs keep it.
std::string under_mpirun(const std::string& args) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
         "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 mpirun -np 2 " +
         bench() + " " + args;
}

// One backend's part of the printed table.
struct Section {
  bool available = false;
  std::vector<std::vector<std::string>> rows;  // the columns of each data line
  std::string footer;                          // "# Out of bounds values : ..."
};

std::map<std::string, Section> parse_table(const std::string& out) {
  std::map<std::string, Section> sections;
  Section* current = nullptr;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# backend ", 0) == 0) {
      const std::string name = line.substr(10, line.find(':') - 10);
      current = &sections[name];
      current->available = line.find(": unavailable: ") == std::string::npos;
      continue;
    }
    if (!current) continue;
    if (line.rfind("# Out of bounds values", 0) == 0) current->footer = line;
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    std::istringstream cols(line);
    std::vector<std::string> v;
    for (std::string c; cols >> c;) v.push_back(c);
    current->rows.push_back(v);
  }
  return sections;
}

// Every data row of every available backend has #wrong 0 (N/A only where the whole placement is N/A),
// each backend has `rows` rows, and the footer says OK.
void expect_all_checked(const std::map<std::string, Section>& sections, const std::vector<std::string>& must_run,
                        size_t rows, const std::string& output) {
  for (const std::string& b : must_run) {
    auto it = sections.find(b);
    ASSERT_NE(it, sections.end()) << "no table for " << b << "\n" << output;
    EXPECT_TRUE(it->second.available) << b << " unavailable\n" << output;
  }
  for (const auto& [name, s] : sections) {
    if (!s.available || name == "memcpy" || name == "add") continue;
    SCOPED_TRACE("backend " + name);
    EXPECT_EQ(s.rows.size(), rows) << output;
    for (const auto& v : s.rows) {
      ASSERT_EQ(v.size(), 13u) << "row of " << v.size() << " columns";
      for (size_t at : {8u, 12u}) {  // #wrong of out-of-place and in-place
        const bool skipped = v[at - 3] == "N/A";
        EXPECT_EQ(v[at], skipped ? "N/A" : "0") << "size " << v[0] << " type " << v[2] << " op " << v[3];
      }
    }
    EXPECT_EQ(s.footer, "# Out of bounds values : 0 OK");
  }
}

size_t expected_rows(const std::string& coll, size_t sizes) {
  const bool reduces = coll == "reduce_scatter" || coll == "all_reduce" || coll == "reduce";
  return sizes * 12 * (reduces ? 5 : 1);
}

class EveryCollective : public ::testing::TestWithParam<std::string> {};

// Two sizes (1 KiB: the latency algorithms; 64 KiB: the rings, and with a small threshold shm's
// cross-memory-attach path), every type and op, checked, on every backend fsdp-run can start.
TEST_P(EveryCollective, UnderFsdpRunEveryBackendAndTypeChecksClean) {
  const std::string coll = GetParam();
  const Result r = run("FSDP_SHM_CMA_MIN_BYTES=4096 " +
                       under_fsdp_run(coll + " -b 1K -e 64K -f 64 -n 1 -w 1 -c 1 -d all -o all -r 1 --backend all"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto sections = parse_table(r.output);
  expect_all_checked(sections, {"shm", "tcp", "gloo", "memcpy"}, expected_rows(coll, 2), r.output);
  // The x += y bound runs beside the reductions only, on fp32 and fp64: 2 sizes x 2 types.
  const bool reduces = expected_rows(coll, 1) > 12;
  ASSERT_EQ(sections.count("add"), reduces ? 1u : 0u) << r.output;
  if (reduces) EXPECT_EQ(sections.at("add").rows.size(), 4u) << r.output;
}

// Under mpirun every backend can start, Open MPI's own collectives and the mpi transport included.
TEST_P(EveryCollective, UnderMpirunEveryBackendAndTypeChecksClean) {
  const std::string coll = GetParam();
  const Result r = run(under_mpirun(coll + " -b 1K -e 64K -f 64 -n 1 -w 1 -c 1 -d all -o all --backend all"));
  ASSERT_EQ(r.code, 0) << r.output;
  expect_all_checked(parse_table(r.output), {"shm", "tcp", "mpi-native", "gloo"}, expected_rows(coll, 2), r.output);
}

INSTANTIATE_TEST_SUITE_P(Bench, EveryCollective,
                         ::testing::Values("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce",
                                           "sendrecv", "alltoall"));

TEST(BenchCli, JsonFollowsTheSchemaAndMatchesTheTable) {
  const std::string dir = ::testing::TempDir() + testing::unique_job_name("bench");
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const Result r = run(under_fsdp_run("all_reduce -b 8 -e 64K -f 8 -n 3 -w 1 -z 1 -d float,bfloat16 --backend shm,ucx "
                                      "--json " + dir + "/out.json --plot " + dir + "/out.svg"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir + "/out.json");
  std::stringstream text;
  text << in.rdbuf();
  const json::Value doc = json::parse(text.str());
  EXPECT_EQ(schema_violation(doc), "");
  const auto sections = parse_table(r.output);
  size_t shm_rows = 0, memcpy_rows = 0;
  for (const json::Value& row : doc.at("rows").array()) {
    const std::string& b = row.at("backend").string();
    shm_rows += b == "shm";
    memcpy_rows += b == "memcpy";
    if (b == "shm") {
      const json::Value& m = row.at("out_of_place");
      EXPECT_GE(m.at("iter_max_us").number(), m.at("iter_min_us").number());
    }
  }
  EXPECT_EQ(shm_rows, sections.at("shm").rows.size());
  EXPECT_EQ(memcpy_rows, sections.at("memcpy").rows.size());
  EXPECT_EQ(shm_rows, 5u * 2);  // 8 B .. 64 KiB by 8: 5 sizes, 2 types
  std::ifstream svg(dir + "/out.svg");
  std::string first;
  std::getline(svg, first);
  EXPECT_EQ(first.rfind("<svg", 0), 0u);
  std::system(("rm -rf " + dir).c_str());
}

TEST(BenchCli, BadFlagsExitWithAClearMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"all_gather --bogus", "fsdp-bench: unknown flag '--bogus' (see fsdp-bench --help)"},
      {"all_gather -b 12Q", "-b: expected a byte count"},
      {"all_gather -d float7", "unknown type 'float7'"},
      {"all_gather --backend nccl", "unknown backend 'nccl'"},
      {"", "name the collective first"},
  };
  for (const auto& [args, says] : cases) {
    const Result r = run(bench() + " " + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << ": " << r.output;
  }
  const Result help = run(bench() + " --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("usage: fsdp-bench COLLECTIVE"), std::string::npos);
}

TEST(BenchCli, BackendsThatCannotRunHereAreReportedNotFatal) {
  const Result r = run(under_fsdp_run("broadcast -b 1K -e 1K -n 1 -w 0 --backend mpi-native,shm"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("# backend mpi-native: unavailable: not started by Open MPI's mpirun"), std::string::npos)
      << r.output;
  EXPECT_TRUE(parse_table(r.output).at("shm").available);
}

TEST(BenchReport, WritesTargetsTablesAndPlotsBetweenTheMarkers) {
  const std::string dir = ::testing::TempDir() + testing::unique_job_name("report");
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const Result r = run(under_fsdp_run("all_gather -b 16M -e 16M -n 1 -w 0 -c 0 --backend shm,tcp --json " + dir +
                                      "/ag.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  {
    std::ofstream md(dir + "/bench.md");
    md << "# Title\n\nhand-written intro\n\n<!-- fsdp-bench:begin (generated by make bench: edit outside these "
          "markers) -->\nold table\n<!-- fsdp-bench:end -->\n\nhand-written analysis\n";
  }
  const Result rep = run(std::string(FSDP_BENCH_REPORT_BIN) + " --markdown " + dir + "/bench.md --plots " + dir +
                         " --launcher 'fsdp-run --nproc 2 --' " + dir + "/ag.json");
  ASSERT_EQ(rep.code, 0) << rep.output;
  std::ifstream in(dir + "/bench.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string md = text.str();
  EXPECT_NE(md.find("hand-written intro"), std::string::npos);
  EXPECT_NE(md.find("hand-written analysis"), std::string::npos);
  EXPECT_EQ(md.find("old table"), std::string::npos);
  EXPECT_NE(md.find("### Targets"), std::string::npos);
  EXPECT_NE(md.find("| all_gather shm busbw vs the memcpy bound at 16 MiB |"), std::string::npos) << md;
  EXPECT_NE(md.find("not measured"), std::string::npos);  // the MPI targets: no mpi-native in this run
  EXPECT_NE(md.find("fsdp-run --nproc 2 -- fsdp-bench all_gather -b 16M"), std::string::npos);
  EXPECT_NE(md.find("![all_gather busbw against size](benchmarks_all_gather.svg)"), std::string::npos);
  std::ifstream svg(dir + "/benchmarks_all_gather.svg");
  EXPECT_TRUE(svg.good());
  const Result bad = run(std::string(FSDP_BENCH_REPORT_BIN) + " --markdown " + dir + "/x.md " + dir + "/bench.md");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("json:"), std::string::npos) << bad.output;
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace fsdp::bench
