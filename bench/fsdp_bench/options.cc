#include "bench/fsdp_bench/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "collectives/types/errors.h"

namespace fsdp::bench {
namespace {

[[noreturn]] void bad(const std::string& what) { throw InvalidArgument(what + " (see fsdp-bench --help)"); }

long parse_int(const std::string& flag, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    bad(flag + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'");
  }
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

std::vector<DataType> parse_types(const std::string& flag, const std::string& text) {
  std::vector<DataType> out;
  if (text == "all") {
    for (int t = 0; t < kNumDataTypes; ++t) out.push_back(static_cast<DataType>(t));
    return out;
  }
  for (const std::string& item : split(text, ',')) {
    auto t = parse_data_type(item);
    if (!t) {
      std::string names;
      for (int i = 0; i < kNumDataTypes; ++i) names += std::string(i ? ", " : "") + std::string(name(static_cast<DataType>(i)));
      bad(flag + ": unknown type '" + item + "'; one of " + names + ", or all");
    }
    out.push_back(*t);
  }
  return out;
}

// nccl-tests' -o all: the five named ops (premul-sum needs a scalar and is left out).
const ReduceKind kNamedOps[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin,
                                ReduceKind::kAvg};

std::vector<ReduceKind> parse_ops(const std::string& flag, const std::string& text) {
  if (text == "all") return {std::begin(kNamedOps), std::end(kNamedOps)};
  std::vector<ReduceKind> out;
  for (const std::string& item : split(text, ',')) {
    bool found = false;
    for (ReduceKind k : kNamedOps) {
      if (name(k) == item) {
        out.push_back(k);
        found = true;
      }
    }
    if (!found) bad(flag + ": unknown op '" + item + "'; one of sum, prod, max, min, avg, or all");
  }
  return out;
}

std::vector<std::string> parse_backends(const std::string& flag, const std::string& text) {
  if (text == "all") return known_backends();
  std::vector<std::string> out;
  for (const std::string& item : split(text, ',')) {
    bool known = false;
    for (const std::string& b : known_backends()) known = known || b == item;
    if (!known) bad(flag + ": unknown backend '" + item + "'; one of shm, tcp, ucx, mpi, mpi-native, gloo, or all");
    out.push_back(item);
  }
  return out;
}

bool parse_bool(const std::string& flag, const std::string& text) { return parse_int(flag, text, 0, 1) == 1; }

struct Flag {
  char short_name;
  const char* long_name;
};
constexpr Flag kFlags[] = {{'b', "minbytes"}, {'e', "maxbytes"},   {'i', "stepbytes"},    {'f', "stepfactor"},
                           {'n', "iters"},    {'w', "warmup_iters"}, {'c', "check"},      {'d', "datatype"},
                           {'o', "op"},       {'r', "root"},       {'a', "average"},      {'z', "blocking"},
                           {'t', "nthreads"}, {'g', "ngpus"},      {'m', "agg_iters"},    {0, "backend"},
                           {0, "json"},       {0, "plot"},         {0, "memcpy"},         {0, "thp"},
                           {'R', "local_register"}};

// The launch flags' help without --transport, which --backend replaces here.
std::string launch_usage() {
  std::string all = launch::launch_flags_usage(), out;
  std::stringstream in(all);
  for (std::string line; std::getline(in, line);) {
    if (line.find("--transport") == std::string::npos) out += line + "\n";
  }
  return out;
}

}  // namespace

const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> all = {"shm", "tcp", "ucx", "mpi", "mpi-native", "gloo"};
  return all;
}

bool is_mxfp8_backend(std::string_view name) {
  return name.size() > kMxfp8Suffix.size() && name.substr(name.size() - kMxfp8Suffix.size()) == kMxfp8Suffix;
}

std::string_view mxfp8_base(std::string_view name) {
  return is_mxfp8_backend(name) ? name.substr(0, name.size() - kMxfp8Suffix.size()) : name;
}

size_t parse_size(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double scale = 1;
  std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  const bool suffix_ok = suffix.empty() || scale > 1;
  const double bytes = v * scale;
  if (text.empty() || end == text.c_str() || !suffix_ok || errno != 0 || !(bytes >= 0) || bytes > 64.0 * (1ull << 30) ||
      bytes != std::floor(bytes)) {
    bad(flag + ": expected a byte count such as 8, 64K, 32M or 1G (at most 64G), got '" + text + "'");
  }
  return static_cast<size_t>(bytes);
}

Options parse_options(std::vector<std::string> args) {
  Options o;
  o.launch = launch::take_launch_flags(args);  // throws InvalidArgument naming the flag
  if (!o.launch.transport.empty()) bad("--transport is not a fsdp-bench flag: choose transports with --backend");
  bool have_collective = false, have_factor = false, have_step = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") throw HelpRequested{};
    if (a.empty() || a[0] != '-') {
      if (have_collective) bad("unexpected argument '" + a + "': one collective per run");
      auto c = parse_collective(a);
      if (!c) {
        std::string names;
        for (Collective k : all_collectives()) names += std::string(names.empty() ? "" : ", ") + std::string(name(k));
        bad("unknown collective '" + a + "'; one of " + names);
      }
      o.collective = *c;
      have_collective = true;
      continue;
    }
    // -b 8, -b8, --minbytes 8, --minbytes=8
    const Flag* flag = nullptr;
    std::string value;
    bool inline_value = false;
    if (a.size() >= 2 && a[1] != '-') {
      for (const Flag& f : kFlags) {
        if (f.short_name == a[1]) flag = &f;
      }
      if (flag && a.size() > 2) {
        value = a.substr(2);
        inline_value = true;
      }
    } else {
      std::string long_name = a.substr(2);
      if (auto eq = long_name.find('='); eq != std::string::npos) {
        value = long_name.substr(eq + 1);
        long_name = long_name.substr(0, eq);
        inline_value = true;
      }
      for (const Flag& f : kFlags) {
        if (long_name == f.long_name) flag = &f;
      }
    }
    if (!flag) bad("unknown flag '" + a + "'");
    const std::string shown = flag->short_name ? std::string("-") + flag->short_name : std::string("--") + flag->long_name;
    if (!inline_value) {
      if (i + 1 >= args.size()) bad(shown + ": missing value");
      value = args[++i];
    }
    const std::string f = flag->long_name;
    if (f == "minbytes") o.min_bytes = parse_size(shown, value);
    if (f == "maxbytes") o.max_bytes = parse_size(shown, value);
    if (f == "stepbytes") {
      o.step_bytes = parse_size(shown, value);
      have_step = true;
    }
    if (f == "stepfactor") {
      char* end = nullptr;
      o.step_factor = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(o.step_factor >= 1) || o.step_factor > 1024) {
        bad(shown + ": expected a factor in [1, 1024], got '" + value + "'");
      }
      have_factor = true;
    }
    if (f == "iters") o.iters = static_cast<int>(parse_int(shown, value, 1, 1000000));
    if (f == "warmup_iters") o.warmup_iters = static_cast<int>(parse_int(shown, value, 0, 1000000));
    if (f == "check") o.check_iters = static_cast<int>(parse_int(shown, value, 0, 1000));
    if (f == "datatype") {
      o.mxfp8 = value == "mxfp8";
      o.types = o.mxfp8 ? std::vector<DataType>{DataType::kBfloat16} : parse_types(shown, value);
    }
    if (f == "op") o.ops = parse_ops(shown, value);
    if (f == "root") o.root = static_cast<int>(parse_int(shown, value, 0, 1 << 24));
    if (f == "average") o.aggregation = static_cast<Aggregation>(parse_int(shown, value, 0, 3));
    if (f == "blocking") o.blocking = parse_bool(shown, value);
    if (f == "nthreads" || f == "ngpus" || f == "agg_iters") {
      parse_int(shown, value, 1, 1);  // one rank per process: start more processes instead
    }
    if (f == "backend") o.backends = parse_backends(shown, value);
    if (f == "json") o.json_path = value;
    if (f == "plot") {
      if (value.size() < 4 || value.substr(value.size() - 4) != ".svg") bad(shown + ": the plot is SVG: name a .svg file, got '" + value + "'");
      o.plot_path = value;
    }
    if (f == "memcpy") o.memcpy_bound = parse_bool(shown, value);
    if (f == "thp") o.huge_pages = parse_bool(shown, value);
    if (f == "local_register") o.registration = static_cast<int>(parse_int(shown, value, 0, 2));
  }
  if (!have_collective) bad("name the collective first, e.g. fsdp-bench all_gather -b 1K -e 64M -f 2");
  if (o.mxfp8) {
    if (o.collective != Collective::kAllGather) bad("-d mxfp8: MXFP8 on the wire is measured for all_gather only");
    // Each of our transports as itself (bf16) and with MXFP8 on the wire, interleaved row by row.
    std::vector<std::string> both;
    for (const std::string& b : o.backends) {
      both.push_back(b);
      if (b != "mpi-native" && b != "gloo") both.push_back(b + std::string(kMxfp8Suffix));
    }
    o.backends = both;
    // The data check's hash bytes are not MXFP8 values; the quantised all-gather is checked bitwise
    // against its reference in tests/collectives/quantized_test.cc.
    o.check_iters = 0;
  }
  if (o.min_bytes > o.max_bytes) {
    bad("-b " + std::to_string(o.min_bytes) + " is above -e " + std::to_string(o.max_bytes));
  }
  if (have_factor && have_step && o.step_factor > 1) bad("-f and -i both given: step by a factor or by bytes, not both");
  if (o.step_factor == 1 && o.step_bytes == 0 && o.min_bytes < o.max_bytes) bad("-i 0 with -f 1 never reaches -e");
  return o;
}

std::vector<size_t> sweep_sizes(const Options& o) {
  std::vector<size_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes);) {
    sizes.push_back(static_cast<size_t>(s));
    const double next = o.step_factor > 1 ? s * o.step_factor : s + static_cast<double>(o.step_bytes);
    if (next <= s) {
      s += 1;  // a factor-1 sweep from 0: still advance
      continue;
    }
    s = next;
  }
  return sizes;
}

std::string usage() {
  return "usage: fsdp-bench COLLECTIVE [flags]\n"
         "  COLLECTIVE: all_gather, reduce_scatter, all_reduce, broadcast, reduce, sendrecv, alltoall\n"
         "nccl-tests flags (-x V, -xV, --long V or --long=V):\n"
         "  -b,--minbytes B      smallest size (default 32M); K, M, G suffixes\n"
         "  -e,--maxbytes B      largest size (default 32M)\n"
         "  -f,--stepfactor F    multiply the size by F each row\n"
         "  -i,--stepbytes B     or add B each row (default 1M, used when -f is 1)\n"
         "  -n,--iters N         timed iterations per row (default 20)\n"
         "  -w,--warmup_iters N  untimed iterations first (default 5)\n"
         "  -c,--check N         checked runs per row (default 1; 0 prints #wrong N/A)\n"
         "  -d,--datatype T      float, double, half, bfloat16, fp8_e4m3, fp8_e5m2, int8, uint8, int32,\n"
         "                       uint32, int64, uint64, a comma list, or all (default float); or mxfp8\n"
         "                       (all_gather: bfloat16 rows, each backend also as <name>-mxfp8 sending\n"
         "                       MXFP8, 33/64 of the bytes; busbw counts bf16-equivalent bytes; unchecked)\n"
         "  -o,--op OP           sum, prod, max, min, avg, a comma list, or all (default sum)\n"
         "  -r,--root R          root of broadcast and reduce (default 0)\n"
         "  -a,--average A       per-rank times to one: 0 rank 0, 1 mean, 2 min, 3 max (default 1)\n"
         "  -z,--blocking 0|1    1: wait for each op and time it alone, reporting the median (default 0:\n"
         "                       iterations back to back, the mean, as nccl-tests)\n"
         "  -R,--local_register R  1 or 2: our backends' send and receive buffers are shared-memory\n"
         "                       windows (Communicator::alloc_window; ours are symmetric, so 1 and 2\n"
         "                       are the same), and collectives run over them where they can (default 0)\n"
         "  -t, -g, -m           accepted with the value 1 only (one rank per process)\n"
         "fsdp-bench flags:\n"
         "  --backend LIST       shm, tcp, ucx, mpi, mpi-native, gloo, a comma list, or all (default shm)\n"
         "  --memcpy 0|1         also measure the bounds: memcpy of the bytes a rank receives, and for\n"
         "                       the reductions x[i] += y[i] over them (row \"add\"; default 1)\n"
         "  --thp 0|1            back the buffers with transparent huge pages (default 0)\n"
         "  --json FILE          every row, machine-readable (schema: docs/benchmarks.md)\n"
         "  --plot FILE.svg      busbw against size, one line per backend\n" +
         launch_usage() +
         "Run it under mpirun, fsdp-run or by hand; rank 0 prints. docs/benchmarks.md has examples.\n";
}

}  // namespace fsdp::bench
