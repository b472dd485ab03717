#include "bench/fsdp_bench/report.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "common/json.h"
#include "bench/fsdp_bench/schema.h"

namespace fsdp::bench {
namespace {

std::string printf_string(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// nccl-tests' time column: fewer decimals as the number grows, always 7 wide.
std::string time_text(double us) {
  if (us >= 10000.0) return printf_string("%7.0f", us);
  if (us >= 100.0) return printf_string("%7.1f", us);
  return printf_string("%7.2f", us);
}

std::string placement_text(const Measurement& m) {
  if (!m.ran) return printf_string("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  const std::string wrong = m.wrong < 0 ? "N/A" : std::to_string(m.wrong);
  return printf_string("  %7s  %6.2f  %6.2f  %6s", time_text(m.time_us).c_str(), m.algbw, m.busbw, wrong.c_str());
}

std::string op_name(const Row& row) { return row.has_op ? std::string(name(row.op)) : "none"; }

void write_measurement(json::Writer& w, const Measurement& m) {
  w.begin_object();
  w.key("ran").value(m.ran);
  w.key("skipped");
  m.skipped.empty() || m.ran ? w.null() : w.value(m.skipped);
  w.key("time_us").value(m.time_us);
  w.key("algbw_gbs").value(m.algbw);
  w.key("busbw_gbs").value(m.busbw);
  w.key("wrong");
  m.wrong < 0 ? w.null() : w.value(static_cast<int64_t>(m.wrong));
  w.key("iter_min_us");
  m.iter_min_us < 0 ? w.null() : w.value(m.iter_min_us);
  w.key("iter_max_us");
  m.iter_max_us < 0 ? w.null() : w.value(m.iter_max_us);
  w.end_object();
}

Measurement read_measurement(const json::Value& v) {
  Measurement m;
  m.ran = v.at("ran").boolean();
  if (!v.at("skipped").is_null()) m.skipped = v.at("skipped").string();
  m.time_us = v.at("time_us").number();
  m.algbw = v.at("algbw_gbs").number();
  m.busbw = v.at("busbw_gbs").number();
  m.wrong = v.at("wrong").is_null() ? -1 : static_cast<long long>(v.at("wrong").number());
  m.iter_min_us = v.at("iter_min_us").is_null() ? -1 : v.at("iter_min_us").number();
  m.iter_max_us = v.at("iter_max_us").is_null() ? -1 : v.at("iter_max_us").number();
  return m;
}

}  // namespace

Report report_from_json(const std::string& text) {
  const json::Value doc = json::parse(text);
  if (std::string why = schema_violation(doc); !why.empty()) throw std::runtime_error("not an fsdp-bench report: " + why);
  Report r;
  r.command = doc.at("command").string();
  r.nranks = static_cast<int>(doc.at("nranks").number());
  Options& o = r.options;
  o.collective = *parse_collective(doc.at("collective").string());
  const json::Value& opt = doc.at("options");
  o.min_bytes = static_cast<size_t>(opt.at("min_bytes").number());
  o.max_bytes = static_cast<size_t>(opt.at("max_bytes").number());
  o.step_bytes = static_cast<size_t>(opt.at("step_bytes").number());
  o.step_factor = opt.at("step_factor").number();
  o.iters = static_cast<int>(opt.at("iters").number());
  o.warmup_iters = static_cast<int>(opt.at("warmup_iters").number());
  o.check_iters = static_cast<int>(opt.at("check_iters").number());
  o.blocking = opt.at("blocking").boolean();
  o.aggregation = static_cast<Aggregation>(static_cast<int>(opt.at("average").number()));
  o.root = static_cast<int>(opt.at("root").number());
  o.huge_pages = opt.at("huge_pages").boolean();
  o.types.clear();
  for (const json::Value& t : opt.at("datatypes").array()) {
    if (auto dt = parse_data_type(t.string())) o.types.push_back(*dt);
  }
  o.ops.clear();
  for (const json::Value& k : opt.at("ops").array()) {
    for (int i = 0; i < kNumReduceKinds; ++i) {
      if (name(static_cast<ReduceKind>(i)) == k.string()) o.ops.push_back(static_cast<ReduceKind>(i));
    }
  }
  const json::Value& m = doc.at("machine");
  r.machine = {m.at("cpu").string(), static_cast<int>(m.at("cpus").number()), m.at("kernel").string(),
               m.at("hostname").string()};
  for (const json::Value& k : doc.at("ranks").array()) {
    r.ranks.push_back({static_cast<int>(k.at("rank").number()), static_cast<int>(k.at("pid").number()),
                       k.at("host").string(), k.at("cpus").string()});
  }
  for (const json::Value& b : doc.at("backends").array()) {
    r.backends.push_back({b.at("name").string(), b.at("describe").string(),
                          b.at("unavailable").is_null() ? "" : b.at("unavailable").string()});
  }
  for (const json::Value& v : doc.at("rows").array()) {
    Row row;
    row.backend = v.at("backend").string();
    row.collective = o.collective;
    row.bytes = static_cast<size_t>(v.at("bytes").number());
    row.count = static_cast<size_t>(v.at("count").number());
    row.type = *parse_data_type(v.at("type").string());
    row.has_op = !v.at("redop").is_null();
    for (int i = 0; row.has_op && i < kNumReduceKinds; ++i) {
      if (name(static_cast<ReduceKind>(i)) == v.at("redop").string()) row.op = static_cast<ReduceKind>(i);
    }
    row.root = static_cast<int>(v.at("root").number());
    row.out_of_place = read_measurement(v.at("out_of_place"));
    row.in_place = read_measurement(v.at("in_place"));
    r.rows.push_back(row);
  }
  return r;
}

Machine this_machine() {
  Machine m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && m.cpu_model.empty()) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  m.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  utsname u{};
  if (::uname(&u) == 0) {
    m.kernel = u.release;
    m.hostname = u.nodename;
  }
  return m;
}

std::string cpu_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(c) + (last > c ? "-" + std::to_string(last) : "");
    c = last;
  }
  return out;
}

Summary summarize(const Report& r, const std::string& backend) {
  Summary s;
  bool checked = false;
  double sum = 0;
  for (const Row& row : r.rows) {
    if (row.backend != backend) continue;
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      if (!m->ran) continue;
      sum += m->busbw;
      ++s.measured;
      if (m->wrong >= 0) {
        checked = true;
        s.wrong += m->wrong;
      }
    }
  }
  if (!checked) s.wrong = -1;
  s.avg_busbw = s.measured ? sum / s.measured : 0;
  return s;
}

std::string format_preamble(const Report& r) {
  const Options& o = r.options;
  std::string out;
  const std::string step = o.step_factor > 1 ? printf_string("%g(factor)", o.step_factor)
                                             : printf_string("%zu(bytes)", o.step_bytes);
  out += printf_string("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: 1 "
                       "validation: %d graph: 0\n",
                       o.min_bytes, o.max_bytes, step.c_str(), o.warmup_iters, o.iters, o.check_iters > 0 ? 1 : 0);
  out += printf_string("# fsdp-bench %s: %d ranks, blocking %d, average %d (%s), check iters %d, buffers %s\n",
                       std::string(name(o.collective)).c_str(), r.nranks, o.blocking ? 1 : 0,
                       static_cast<int>(o.aggregation),
                       o.blocking ? "of per-rank medians" : "of per-rank means", o.check_iters,
                       o.huge_pages ? "on transparent huge pages" : "on 4 KiB pages");
  out += "# machine: " + r.machine.cpu_model + ", " + std::to_string(r.machine.cpus) + " CPUs, Linux " +
         r.machine.kernel + "\n#\n# Using devices\n";
  for (const RankInfo& k : r.ranks) {
    out += printf_string("#  Rank %2d Group  0 Pid %6d on %10s device %2d [cpu %s] host memory\n", k.rank, k.pid,
                         k.host.c_str(), k.rank, k.cpus.c_str());
  }
  out += "#\n";
  return out;
}

std::string format_backend(const Report& r, const BackendInfo& b) {
  std::string out = "# backend " + b.name + ": ";
  if (!b.unavailable.empty()) return out + "unavailable: " + b.unavailable + "\n#\n";
  out += b.describe + "\n";
  out += printf_string("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
                       "", "", "", "", "");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
                       "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
                       "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::string notes;
  for (const Row& row : r.rows) {
    if (row.backend != b.name) continue;
    out += printf_string("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, std::string(name(row.type)).c_str(),
                         op_name(row).c_str(), row.root);
    out += placement_text(row.out_of_place) + placement_text(row.in_place) + "\n";
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      const std::string note = std::string(name(row.type)) + " " + op_name(row) + ": " + m->skipped;
      if (!m->ran && !m->skipped.empty() && m->skipped != "no in-place form" && notes.find(note) == std::string::npos) {
        notes += "#   N/A " + note + "\n";
      }
    }
  }
  const Summary s = summarize(r, b.name);
  out += notes;
  out += printf_string("# Out of bounds values : %lld %s\n", s.wrong < 0 ? 0 : s.wrong, s.wrong > 0 ? "FAILED" : "OK");
  out += printf_string("# Avg bus bandwidth    : %g \n#\n", s.avg_busbw);
  return out;
}

std::string format_json(const Report& r) {
  const Options& o = r.options;
  json::Writer w;
  w.begin_object();
  w.key("schema").value("fsdp-bench/1");
  w.key("command").value(r.command);
  w.key("collective").value(name(o.collective));
  w.key("nranks").value(r.nranks);
  w.key("options").begin_object();
  w.key("min_bytes").value(o.min_bytes);
  w.key("max_bytes").value(o.max_bytes);
  w.key("step_factor").value(o.step_factor);
  w.key("step_bytes").value(o.step_bytes);
  w.key("iters").value(o.iters);
  w.key("warmup_iters").value(o.warmup_iters);
  w.key("check_iters").value(o.check_iters);
  w.key("blocking").value(o.blocking);
  w.key("average").value(static_cast<int>(o.aggregation));
  w.key("root").value(o.root);
  w.key("huge_pages").value(o.huge_pages);
  w.key("datatypes").begin_array();
  for (DataType t : o.types) w.value(name(t));
  w.end_array();
  w.key("ops").begin_array();
  for (ReduceKind k : o.ops) w.value(name(k));
  w.end_array();
  w.end_object();
  w.key("machine").begin_object();
  w.key("cpu").value(r.machine.cpu_model);
  w.key("cpus").value(r.machine.cpus);
  w.key("kernel").value(r.machine.kernel);
  w.key("hostname").value(r.machine.hostname);
  w.end_object();
  w.key("ranks").begin_array();
  for (const RankInfo& k : r.ranks) {
    w.begin_object();
    w.key("rank").value(k.rank);
    w.key("pid").value(k.pid);
    w.key("host").value(k.host);
    w.key("cpus").value(k.cpus);
    w.end_object();
  }
  w.end_array();
  w.key("backends").begin_array();
  for (const BackendInfo& b : r.backends) {
    const Summary s = summarize(r, b.name);
    w.begin_object();
    w.key("name").value(b.name);
    w.key("available").value(b.unavailable.empty());
    w.key("describe").value(b.describe);
    w.key("unavailable");
    b.unavailable.empty() ? w.null() : w.value(b.unavailable);
    w.key("avg_busbw_gbs").value(s.avg_busbw);
    w.key("wrong");
    s.wrong < 0 ? w.null() : w.value(static_cast<int64_t>(s.wrong));
    w.end_object();
  }
  w.end_array();
  w.key("rows").begin_array();
  for (const Row& row : r.rows) {
    w.begin_object();
    w.key("backend").value(row.backend);
    w.key("bytes").value(row.bytes);
    w.key("count").value(row.count);
    w.key("type").value(name(row.type));
    w.key("redop");
    row.has_op ? w.value(name(row.op)) : w.null();
    w.key("root").value(row.root);
    w.key("out_of_place");
    write_measurement(w, row.out_of_place);
    w.key("in_place");
    write_measurement(w, row.in_place);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.text() + "\n";
}

}  // namespace fsdp::bench
