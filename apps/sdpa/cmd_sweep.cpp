// cmd_sweep.cpp — `sdpa sweep`: train every (policy, head size, seed) of a grid, each
// an `sdpa train` child process (at most --jobs at a time), then print a summary
// table and write DIR/index.html (plots by python/sdpa_train_report.py) and
// DIR/sweep.json, all-or-nothing like `sdpa lab report`.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "nn/policy.hpp"
#include "nn/train.hpp"

namespace sdpa::cli {
namespace {

struct SweepArgs {
  nn::TrainConfig base;
  std::vector<std::string> policies = nn::default_policies();
  std::vector<std::uint64_t> seeds{1, 2, 3};
  std::vector<i64> d_heads{8, 32};
  int jobs = 0;
  bool no_ensemble = false;
  std::string out;
};

struct Run {
  std::string policy;
  i64 d_head = 0;
  std::uint64_t seed = 0;
  std::string log, err, ckpt;  // files in the work directory
  std::vector<std::string> lines;
  std::string final_line;
  pid_t pid = -1;
};

// A number or array field of one of our own JSON lines ("key": value).
double field(const std::string& line, const std::string& key) {
  const std::string pat = "\"" + key + "\": ";
  const auto at = line.find(pat);
  if (at == std::string::npos) return NAN;
  const char* s = line.c_str() + at + pat.size();
  if (std::strncmp(s, "null", 4) == 0) return NAN;
  if (std::strncmp(s, "true", 4) == 0) return 1;
  if (std::strncmp(s, "false", 5) == 0) return 0;
  return std::strtod(s, nullptr);
}
std::string raw_field(const std::string& line, const std::string& key) {  // an array, verbatim
  const std::string pat = "\"" + key + "\": ";
  const auto at = line.find(pat);
  if (at == std::string::npos) return "null";
  std::size_t i = at + pat.size(), depth = 0, j = i;
  for (; j < line.size(); ++j) {
    if (line[j] == '[') ++depth;
    if (line[j] == ']' && --depth == 0) break;
    if (depth == 0 && (line[j] == ',' || line[j] == '}')) return line.substr(i, j - i);
  }
  return line.substr(i, j + 1 - i);
}
std::vector<double> numbers_in(const std::string& s) {
  std::vector<double> out;
  for (const char* p = s.c_str(); *p;) {
    if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '.') {
      char* end = nullptr;
      out.push_back(std::strtod(p, &end));
      p = end;
    } else {
      ++p;
    }
  }
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}
std::string tail_of(const std::string& path) {
  const auto ls = read_lines(path);
  return ls.empty() ? std::string("(no message)") : ls.back();
}

std::vector<std::string> train_argv(const nn::TrainConfig& c, const std::string& policy, i64 d_head,
                                    std::uint64_t seed) {
  // Option, value pairs, laid out by hand.
  // clang-format off
  return {"train",      "--task",       c.task,     "--policy",  policy,
          "--d-model",  std::to_string(c.d_model),  "--heads",   std::to_string(c.d_model / d_head),
          "--layers",   std::to_string(c.layers),   "--seq",     std::to_string(c.seq),
          "--steps",    std::to_string(c.steps),    "--lr",      fmt::format("{}", c.lr),
          "--warmup",   std::to_string(c.warmup),   "--weight-decay", fmt::format("{}", c.weight_decay),
          "--clip",     fmt::format("{}", c.clip),  "--batch",   std::to_string(c.batch),
          "--init",     c.init,                     "--seed",    std::to_string(seed),
          "--threads",  std::to_string(c.threads),  "--log-every", std::to_string(c.log_every),
          "--eval-size", std::to_string(c.eval_size), "--threshold", fmt::format("{}", c.threshold)};
  // clang-format on
}

pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<char*> argv;
  static std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("sweep: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(127);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Runs the commands, at most `jobs` at once; throws with the first failure's message.
void run_all(std::vector<Run*>& runs, const std::function<std::vector<std::string>(const Run&)>& args, int jobs,
             const std::string& what) {
  const bool tty = stderr_is_terminal();
  std::size_t next = 0, done = 0;
  std::vector<Run*> active;
  std::string failure;
  const double t0 = now_seconds();
  while (done < runs.size()) {
    while (failure.empty() && next < runs.size() && static_cast<int>(active.size()) < jobs) {
      Run* r = runs[next++];
      r->pid = spawn(args(*r), r->log, r->err);
      active.push_back(r);
    }
    if (active.empty()) break;
    int status = 0;
    pid_t pid;
    while ((pid = ::wait(&status)) < 0 && errno == EINTR) {
    }
    if (pid < 0) throw Error(std::string("sweep: wait failed: ") + std::strerror(errno));
    auto it = std::find_if(active.begin(), active.end(), [&](Run* r) { return r->pid == pid; });
    if (it == active.end()) continue;
    Run* r = *it;
    active.erase(it);
    ++done;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code != 0 && failure.empty())
      failure = fmt::format("sweep: {} of policy {} d_head {} seed {} failed (exit {}): {}", what, r->policy, r->d_head,
                            r->seed, code, tail_of(r->err));
    if (tty)
      fmt::print(stderr, "\r\033[Ksdpa sweep: {} {}/{} done ({:.0f} s; last {} d_head={} seed={})", what, done,
                 runs.size(), seconds_since(t0), r->policy, r->d_head, r->seed);
  }
  for (Run* r : active) wait_for(r->pid);
  if (tty) fmt::print(stderr, "\r\033[K");
  if (!failure.empty()) throw Error(failure);
}

struct Agg {
  std::vector<double> loss, acc, long_acc, steps_to, beta;
  int diverged = 0, reached = 0, n = 0;
};
double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double sd(const std::vector<double>& v) {  // sample standard deviation over seeds; none for one seed
  if (v.size() < 2) return NAN;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
std::string num(double x) { return std::isfinite(x) ? fmt::format("{:.6g}", x) : "null"; }
// "mean ± sd" over seeds; just the mean when there is one seed (no spread to show)
std::string pm(const std::vector<double>& v) {
  if (v.empty()) return "-";
  return v.size() < 2 ? fmt::format("{:.4f}", mean(v)) : fmt::format("{:.4f} ± {:.4f}", mean(v), sd(v));
}

struct TempDir {
  std::string path;
  ~TempDir() {
    if (path.empty()) return;
    const std::string cmd = "rm -rf -- '" + path + "'";
    if (std::system(cmd.c_str()) != 0) {
    }
  }
};

int run_sweep(SweepArgs& a) {
  if (a.out.empty()) throw Error("--out: give a directory for the report");
  if (a.policies.empty() || a.seeds.empty() || a.d_heads.empty())
    throw Error("sweep: --policies, --seeds and --d-head each need at least one value");
  for (const auto& p : a.policies) nn::parse_policy(p, "--policies");
  for (i64 d : a.d_heads)
    if (d <= 0 || a.base.d_model % d != 0)
      throw Error("--d-head: " + std::to_string(d) + " does not divide --d-model " + std::to_string(a.base.d_model));
  nn::parse_task(a.base.task, a.base.seq);
  const long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max<long>(1, std::min<long>(2, ncpu)));
  if (a.base.threads <= 0) a.base.threads = 1;

  const bool created = ::mkdir(a.out.c_str(), 0755) == 0;
  if (!created && errno != EEXIST)
    throw Error("--out: cannot create directory '" + a.out + "': " + std::strerror(errno));
  struct RemoveIfEmpty {
    const std::string& dir;
    bool on;
    ~RemoveIfEmpty() {
      if (on) ::rmdir(dir.c_str());
    }
  } cleanup{a.out, created};
  {
    io::OutputSet probe;
    probe.add(a.out + "/index.html", {});
  }
  const char* py_env = std::getenv("SDPA_PYTHON");
  const std::string python = py_env && *py_env ? py_env : "/usr/bin/python3";
  const char* script_env = std::getenv("SDPA_TRAIN_REPORT_SCRIPT");
  const std::string script = script_env && *script_env ? script_env : SDPA_TRAIN_REPORT_SCRIPT;
  if (::access(script.c_str(), R_OK) != 0)
    throw Error("sweep: plotting script not found at '" + script + "' (set SDPA_TRAIN_REPORT_SCRIPT)");

  TempDir work;
  {
    std::string tmpl = a.out + "/.sweep.XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw Error("sweep: cannot create a work directory in '" + a.out + "'");
    work.path = tmpl;
  }
  const double t_start = now_seconds();
  std::vector<Run> runs;
  for (i64 dh : a.d_heads)
    for (const auto& p : a.policies)
      for (auto s : a.seeds) {
        Run r;
        r.policy = p;
        r.d_head = dh;
        r.seed = s;
        const std::string stem = fmt::format("{}/{}_{}_{}", work.path, runs.size(), dh, s);
        r.log = stem + ".jsonl";
        r.err = stem + ".err";
        r.ckpt = stem + ".ckpt";
        runs.push_back(r);
      }
  const bool ensemble =
      !a.no_ensemble && std::find(a.policies.begin(), a.policies.end(), "adaptive") != a.policies.end();
  std::vector<Run*> all;
  for (auto& r : runs) all.push_back(&r);
  fmt::print(stderr, "sdpa sweep: {} runs ({} policies x {} head sizes x {} seeds), {} at a time, {} thread(s) each\n",
             runs.size(), a.policies.size(), a.d_heads.size(), a.seeds.size(), jobs, a.base.threads);
  run_all(
      all,
      [&](const Run& r) {
        auto v = train_argv(a.base, r.policy, r.d_head, r.seed);
        if (ensemble && r.policy == "adaptive") {
          v.push_back("--save");
          v.push_back(r.ckpt);
        }
        return v;
      },
      jobs, "training");
  for (auto& r : runs) {
    r.lines = read_lines(r.log);
    if (r.lines.empty() || r.lines.back().find("\"final\": true") == std::string::npos)
      throw Error("sweep: run " + r.policy + " seed " + std::to_string(r.seed) + " wrote no summary line");
    r.final_line = r.lines.back();
    r.lines.pop_back();
  }
  const double train_seconds = seconds_since(t_start);

  // ---- the ensemble rule: pick the inference β of the best adaptive model ----------
  std::string ensemble_json = "[]";
  std::vector<std::string> ensemble_rows;
  if (ensemble) {
    std::vector<Run> evals;
    std::vector<std::string> frozen_for;  // per eval run: the β list, or "" for its own adaptive β
    std::map<i64, std::pair<std::uint64_t, std::string>> best;  // d_head -> (seed, β list)
    for (i64 dh : a.d_heads) {
      const Run* b = nullptr;
      for (const auto& r : runs)
        if (r.policy == "adaptive" && r.d_head == dh && field(r.final_line, "diverged") == 0 &&
            (!b || field(r.final_line, "eval_loss") < field(b->final_line, "eval_loss")))
          b = &r;
      if (!b) continue;
      std::string list;
      for (double x : numbers_in(raw_field(b->final_line, "beta")))
        list += (list.empty() ? "" : ",") + fmt::format("{:.9g}", x);
      best[dh] = {b->seed, list};
      for (const auto& r : runs)
        if (r.policy == "adaptive" && r.d_head == dh && field(r.final_line, "diverged") == 0)
          for (int frozen = 0; frozen < 2; ++frozen) {
            Run e = r;
            const std::string stem = fmt::format("{}/eval_{}", work.path, evals.size());
            e.log = stem + ".jsonl";
            e.err = stem + ".err";
            evals.push_back(e);
            frozen_for.push_back(frozen ? list : "");
          }
    }
    std::vector<Run*> ev;
    for (auto& e : evals) ev.push_back(&e);
    std::size_t k = 0;
    std::map<const Run*, std::size_t> index;
    for (auto& e : evals) index[&e] = k++;
    run_all(
        ev,
        [&](const Run& e) {
          auto v = train_argv(a.base, e.policy, e.d_head, e.seed);
          v.insert(v.end(), {"--resume", e.ckpt, "--eval-only", "--eval-set", "test"});
          const std::string& fz = frozen_for[index.at(&e)];
          if (!fz.empty()) v.insert(v.end(), {"--frozen-beta", fz});
          return v;
        },
        jobs, "ensemble evaluation");
    ensemble_json = "[";
    for (std::size_t i = 0; i < evals.size(); i += 2) {
      const auto own = read_lines(evals[i].log), fz = read_lines(evals[i + 1].log);
      if (own.empty() || fz.empty()) throw Error("sweep: an ensemble evaluation wrote nothing");
      const auto& bst = best[evals[i].d_head];
      const std::string row = fmt::format(
          "{{\"d_head\": {}, \"seed\": {}, \"best_seed\": {}, \"ensemble_beta\": [{}], \"own_test_loss\": {}, "
          "\"own_test_accuracy\": {}, \"ensemble_test_loss\": {}, \"ensemble_test_accuracy\": {}, \"own_beta\": {}}}",
          evals[i].d_head, evals[i].seed, bst.first, bst.second, num(field(own.back(), "eval_loss")),
          num(field(own.back(), "eval_accuracy")), num(field(fz.back(), "eval_loss")),
          num(field(fz.back(), "eval_accuracy")), raw_field(own.back(), "beta"));
      ensemble_rows.push_back(row);
      ensemble_json += (i ? ",\n" : "") + row;
    }
    ensemble_json += "]";
  }

  // ---- summary ---------------------------------------------------------------------
  std::map<std::pair<i64, std::string>, Agg> agg;
  for (const auto& r : runs) {
    Agg& g = agg[{r.d_head, r.policy}];
    const std::string& f = r.final_line;
    g.n++;
    if (field(f, "diverged") == 1) {
      g.diverged++;
      continue;
    }
    g.loss.push_back(field(f, "eval_loss"));
    g.acc.push_back(field(f, "eval_accuracy"));
    if (std::isfinite(field(f, "eval_long_accuracy"))) g.long_acc.push_back(field(f, "eval_long_accuracy"));
    const double st = field(f, "steps_to_threshold");
    if (st > 0) {
      g.reached++;
      g.steps_to.push_back(st);
    }
    const auto b = numbers_in(raw_field(f, "beta"));
    g.beta.push_back(mean(b));
  }
  std::string table = fmt::format(
      "sdpa sweep: task {} d_model {} layers {} seq {} steps {} batch {} lr {} seeds {} ({:.0f} s)\n"
      "{:<16} {:>6} {:>18} {:>18} {:>16} {:>9} {:>10}{}\n",
      a.base.task, a.base.d_model, a.base.layers, a.base.seq, a.base.steps, a.base.batch, a.base.lr, a.seeds.size(),
      seconds_since(t_start), "policy", "d_head", "eval loss", "eval accuracy",
      fmt::format("steps to {:.0f}%", 100 * a.base.threshold), "diverged", "final beta",
      a.base.task == "lengthgen" ? fmt::format(" {:>18}", "accuracy at 2n") : "");
  std::string summary_json = "[";
  bool first = true;
  for (i64 dh : a.d_heads)
    for (const auto& p : a.policies) {
      const Agg& g = agg[{dh, p}];
      const std::string steps =
          g.reached ? fmt::format("{:.0f} ({}/{})", mean(g.steps_to), g.reached, g.n) : fmt::format("- (0/{})", g.n);
      table += fmt::format("{:<16} {:>6} {:>18} {:>18} {:>16} {:>9} {:>10}{}\n", p, dh, pm(g.loss), pm(g.acc), steps,
                           fmt::format("{}/{}", g.diverged, g.n), fmt::format("{:.4g}", mean(g.beta)),
                           g.long_acc.empty() ? "" : fmt::format(" {:>18}", pm(g.long_acc)));
      summary_json += fmt::format(
          "{}{{\"policy\": \"{}\", \"d_head\": {}, \"runs\": {}, \"diverged\": {}, \"eval_loss_mean\": {}, "
          "\"eval_loss_sd\": {}, \"eval_accuracy_mean\": {}, \"eval_accuracy_sd\": {}, \"reached\": {}, "
          "\"steps_to_threshold_mean\": {}, \"beta_mean\": {}, \"long_accuracy_mean\": {}, \"long_accuracy_sd\": {}}}",
          first ? "" : ",\n", p, dh, g.n, g.diverged, num(mean(g.loss)), num(sd(g.loss)), num(mean(g.acc)),
          num(sd(g.acc)), g.reached, num(mean(g.steps_to)), num(mean(g.beta)), num(mean(g.long_acc)),
          num(sd(g.long_acc)));
      first = false;
    }
  summary_json += "]";
  if (!ensemble_rows.empty()) {
    table += "ensemble rule (adaptive): inference beta of the best seed on the validation set, scored on a test set\n";
    table += fmt::format("{:>6} {:>5} {:>9} {:>22} {:>22}\n", "d_head", "seed", "best seed", "own beta: loss / acc",
                         "ensemble beta: loss/acc");
    for (const auto& row : ensemble_rows)
      table += fmt::format(
          "{:>6} {:>5} {:>9} {:>22} {:>22}\n", field(row, "d_head"), field(row, "seed"), field(row, "best_seed"),
          fmt::format("{:.4f} / {:.4f}", field(row, "own_test_loss"), field(row, "own_test_accuracy")),
          fmt::format("{:.4f} / {:.4f}", field(row, "ensemble_test_loss"), field(row, "ensemble_test_accuracy")));
  }

  std::string doc = fmt::format(
      "{{\"version\": \"{}\", \"task\": \"{}\", \"d_model\": {}, \"layers\": {}, \"seq\": {}, \"steps\": {}, "
      "\"batch\": {}, \"lr\": {}, \"warmup\": {}, \"init\": \"{}\", \"threshold\": {}, \"jobs\": {}, \"threads\": {}, "
      "\"seconds\": {:.1f}, \"train_seconds\": {:.1f}, \"table\": \"{}\",\n\"summary\": {},\n\"ensemble\": "
      "{},\n\"runs\": [",
      SDPA_VERSION_STRING, a.base.task, a.base.d_model, a.base.layers, a.base.seq, a.base.steps, a.base.batch,
      num(a.base.lr), a.base.warmup, a.base.init, num(a.base.threshold), jobs, a.base.threads, seconds_since(t_start),
      train_seconds,
      [&] {
        std::string e;
        for (char ch : table)
          e += ch == '\n' ? std::string("\\n") : ch == '"' ? std::string("\\\"") : std::string(1, ch);
        return e;
      }(),
      summary_json, ensemble_json);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    doc += fmt::format("{}{{\"policy\": \"{}\", \"d_head\": {}, \"seed\": {}, \"final\": {}, \"log\": [\n",
                       i ? ",\n" : "", runs[i].policy, runs[i].d_head, runs[i].seed, runs[i].final_line);
    for (std::size_t j = 0; j < runs[i].lines.size(); ++j) doc += (j ? ",\n" : "") + runs[i].lines[j];
    doc += "]}";
  }
  doc += "]}\n";

  io::OutputSet files;
  const std::string data_path = files.add(a.out + "/sweep.json", std::vector<unsigned char>(doc.begin(), doc.end()));
  files.add(a.out + "/index.html", run_plot_script("sweep", python, script, {"--data", data_path}));
  files.commit();
  fmt::print("{}", table);
  fmt::print("sdpa sweep: wrote {}/index.html and {}/sweep.json ({:.1f} s)\n", a.out, a.out, seconds_since(t_start));
  return 0;
}

}  // namespace

Command add_sweep(CLI::App& parent) {
  auto a = std::make_shared<SweepArgs>();
  // The sweep's grid (docs/training.md): sort at width 64, where every policy learns in a
  // few hundred steps, so that 8 policies x 2 head sizes x 3 seeds = 48 runs, two at a
  // time, fit in minutes on a 2-core machine; not `sdpa train`'s mqar defaults, whose
  // single wide head leaves no head size to sweep.
  a->base.task = "sort";
  a->base.d_model = 64;
  a->base.lr = 3e-3;
  a->base.steps = 400;
  a->base.warmup = 50;
  CLI::App* app = parent.add_subcommand(
      "sweep",
      "Train every policy x head size x seed (sdpa train processes, --jobs at a time); print a summary "
      "table and write DIR/index.html and DIR/sweep.json (docs/training.md)");
  add_train_options(app, a->base, false);
  app->add_option("--policies", a->policies, "Temperature policies")->capture_default_str();
  app->add_option("--seeds", a->seeds, "Seeds (one run each)")->capture_default_str();
  app->add_option("--d-head", a->d_heads, "Head sizes d_k (heads = d_model / d_k)")->capture_default_str();
  app->add_option("--jobs", a->jobs, "Runs at a time (0: min(2, cores))")->capture_default_str();
  app->add_flag("--no-ensemble", a->no_ensemble, "Skip the ensemble rule's evaluation of the adaptive runs");
  app->add_option("--out", a->out, "Output directory (created if missing)")->required();
  return {app, [a] { return run_sweep(*a); }};
}

}  // namespace sdpa::cli
