// fsdp-bench's command line: nccl-tests' flags in all their spellings, the sweep they describe, and
// errors that name the flag, the bad value and what would be accepted.
#include "bench/fsdp_bench/options.h"

#include <gtest/gtest.h>

#include "collectives/types/errors.h"

namespace fsdp::bench {
namespace {

Options parse(std::vector<std::string> args) { return parse_options(std::move(args)); }

// The InvalidArgument message for `args`, or "" when they parse.
std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Options, DefaultsAreNcclTests) {
  const Options o = parse({"all_gather"});
  EXPECT_EQ(o.collective, Collective::kAllGather);
  EXPECT_EQ(o.min_bytes, 32u << 20);
  EXPECT_EQ(o.max_bytes, 32u << 20);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup_iters, 5);
  EXPECT_EQ(o.check_iters, 1);
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::kFloat32});
  EXPECT_EQ(o.ops, std::vector<ReduceKind>{ReduceKind::kSum});
  EXPECT_EQ(o.aggregation, Aggregation::kMean);
  EXPECT_FALSE(o.blocking);
  EXPECT_EQ(o.backends, std::vector<std::string>{"shm"});
}

TEST(Options, ShortLongAndInlineSpellings) {
  const Options o = parse({"reduce_scatter", "-b", "8", "-e128M", "--stepfactor", "2", "--iters=7", "-w", "0", "-c",
                           "0", "-d", "half,bfloat16", "--op=max", "-r", "1", "-a", "2", "-z", "1", "--backend",
                           "shm,gloo", "--json", "x.json", "--plot", "x.svg", "-t", "1", "-g", "1"});
  EXPECT_EQ(o.collective, Collective::kReduceScatter);
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.step_factor, 2.0);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup_iters, 0);
  EXPECT_EQ(o.check_iters, 0);
  EXPECT_EQ(o.types, (std::vector<DataType>{DataType::kFloat16, DataType::kBfloat16}));
  EXPECT_EQ(o.ops, std::vector<ReduceKind>{ReduceKind::kMax});
  EXPECT_EQ(o.root, 1);
  EXPECT_EQ(o.aggregation, Aggregation::kMin);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.backends, (std::vector<std::string>{"shm", "gloo"}));
  EXPECT_EQ(o.json_path, "x.json");
  EXPECT_EQ(o.plot_path, "x.svg");
}

TEST(Options, AllMeansEveryTypeOpAndBackend) {
  const Options o = parse({"all_reduce", "-d", "all", "-o", "all", "--backend", "all"});
  EXPECT_EQ(o.types.size(), static_cast<size_t>(kNumDataTypes));
  EXPECT_EQ(o.ops.size(), 5u);
  EXPECT_EQ(o.backends, known_backends());
}

// -d mxfp8: bf16 rows, each of our backends also with MXFP8 on the wire, unchecked; all_gather only.
TEST(Options, Mxfp8PairsEachOfOurBackendsWithItsMxfp8Twin) {
  const Options o = parse({"all_gather", "-d", "mxfp8", "--backend", "shm,tcp,gloo"});
  EXPECT_TRUE(o.mxfp8);
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::kBfloat16});
  EXPECT_EQ(o.backends, (std::vector<std::string>{"shm", "shm-mxfp8", "tcp", "tcp-mxfp8", "gloo"}));
  EXPECT_EQ(o.check_iters, 0);
  EXPECT_TRUE(is_mxfp8_backend("tcp-mxfp8"));
  EXPECT_EQ(mxfp8_base("tcp-mxfp8"), "tcp");
  EXPECT_FALSE(is_mxfp8_backend("shm"));
  EXPECT_NE(error_of({"all_reduce", "-d", "mxfp8"}).find("all_gather only"), std::string::npos);
}

TEST(Options, LaunchFlagsOverrideTheEnvironment) {
  const Options o = parse({"broadcast", "--rank", "1", "--world-size=2", "--master-addr", "127.0.0.1"});
  EXPECT_EQ(o.launch.overrides.rank, 1);
  EXPECT_EQ(o.launch.overrides.world_size, 2);
  EXPECT_EQ(o.launch.overrides.master_addr, "127.0.0.1");
}

TEST(Options, SizesTakeSuffixes) {
  EXPECT_EQ(parse_size("-b", "0"), 0u);
  EXPECT_EQ(parse_size("-b", "1K"), 1024u);
  EXPECT_EQ(parse_size("-b", "64m"), 64u << 20);
  EXPECT_EQ(parse_size("-b", "2G"), 2ull << 30);
  EXPECT_EQ(parse_size("-b", "0.5K"), 512u);
}

TEST(Options, SweepByFactorAndByStep) {
  EXPECT_EQ(sweep_sizes(parse({"all_gather", "-b", "1K", "-e", "64K", "-f", "4"})),
            (std::vector<size_t>{1024, 4096, 16384, 65536}));
  EXPECT_EQ(sweep_sizes(parse({"all_gather", "-b", "1M", "-e", "3M", "-i", "1M"})),
            (std::vector<size_t>{1u << 20, 2u << 20, 3u << 20}));
  EXPECT_EQ(sweep_sizes(parse({"all_gather", "-b", "8", "-e", "8"})), std::vector<size_t>{8});
}

TEST(Options, BadFlagsAreRejectedByName) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"all_gather", "--bogus"}, "unknown flag '--bogus'"},
      {{"all_gather", "-x", "1"}, "unknown flag '-x'"},
      {{"all_gather", "-b"}, "-b: missing value"},
      {{"all_gather", "-b", "12Q"}, "-b: expected a byte count such as 8, 64K, 32M or 1G"},
      {{"all_gather", "-e", "-5"}, "-e: expected a byte count"},
      {{"all_gather", "-b", "2M", "-e", "1M"}, "-b 2097152 is above -e 1048576"},
      {{"all_gather", "-f", "0.5"}, "-f: expected a factor in [1, 1024]"},
      {{"all_gather", "-f", "2", "-i", "1M"}, "-f and -i both given"},
      {{"all_gather", "-n", "0"}, "-n: expected an integer in [1, 1000000], got '0'"},
      {{"all_gather", "-d", "float7"}, "-d: unknown type 'float7'; one of int8"},
      {{"all_reduce", "-o", "mean"}, "-o: unknown op 'mean'; one of sum, prod, max, min, avg, or all"},
      {{"all_gather", "--backend", "nccl"}, "--backend: unknown backend 'nccl'"},
      {{"all_gather", "-a", "4"}, "-a: expected an integer in [0, 3], got '4'"},
      {{"all_gather", "-z", "yes"}, "-z: expected an integer in [0, 1], got 'yes'"},
      {{"all_gather", "-t", "2"}, "-t: expected an integer in [1, 1]"},
      {{"all_gather", "--plot", "out.png"}, "--plot: the plot is SVG"},
      {{"all_gather", "--transport", "shm"}, "choose transports with --backend"},
      {{"all_gather", "--rank", "x"}, "--rank: expected an integer"},
      {{"-b", "8"}, "name the collective first"},
      {{"allgather"}, "unknown collective 'allgather'; one of all_gather, reduce_scatter"},
      {{"all_gather", "all_reduce"}, "unexpected argument 'all_reduce': one collective per run"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.args);
    EXPECT_NE(e.find(c.says), std::string::npos) << "args starting " << c.args[0] << " gave: '" << e << "'";
  }
}

TEST(Options, HelpIsNotAnError) {
  EXPECT_THROW(parse({"--help"}), HelpRequested);
  EXPECT_NE(usage().find("--backend LIST"), std::string::npos);
  EXPECT_EQ(usage().find("--transport"), std::string::npos);  // --backend replaces it here
}

}  // namespace
}  // namespace fsdp::bench
