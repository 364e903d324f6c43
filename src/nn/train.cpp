// nn/train.cpp — the training loop (see train.hpp).
#include "nn/train.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "io/atomic_file.hpp"
#include "io/json.hpp"

namespace sdpa::nn {

namespace {

constexpr std::uint64_t kEvalSeed = 0x5EED0E7A1ull;

nlohmann::ordered_json array(const std::vector<double>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (double x : v) a.push_back(io::json_number(x));
  return a;
}

std::string num(double x) { return std::isfinite(x) ? fmt::format("{:.6g}", x) : "null"; }

struct Eval {
  double loss = 0, accuracy = 0;
};

Eval evaluate(Model<float>& m, const Batch& ev, i64 chunk) {
  double loss = 0;
  i64 counted = 0, correct = 0;
  for (i64 b0 = 0; b0 < ev.B; b0 += chunk) {
    const i64 n = std::min(chunk, ev.B - b0);
    const auto res = m.forward(ev.tokens.data() + b0 * ev.T, ev.targets.data() + b0 * ev.T,
                               ev.pos0.empty() ? nullptr : ev.pos0.data() + b0, n, ev.T, false);
    loss += res.loss * static_cast<double>(res.counted);
    counted += res.counted;
    correct += res.correct;
  }
  return {counted ? loss / static_cast<double>(counted) : 0.0,
          counted ? static_cast<double>(correct) / static_cast<double>(counted) : 0.0};
}

std::string first_difference(const std::string& a, const std::string& b) {
  auto field = [](const std::string& s, std::size_t& at) {
    const std::size_t end = s.find(';', at);
    std::string f = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? s.size() : end + 1;
    return f;
  };
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const std::string fa = field(a, i), fb = field(b, j);
    if (fa != fb) return "checkpoint has " + (fa.empty() ? "?" : fa) + ", this run has " + (fb.empty() ? "?" : fb);
  }
  return "identity differs";
}

}  // namespace

std::string TrainConfig::identity(const Task& t) const {
  const std::string text =
      t.corpus ? fmt::format(";corpus={:016x};alphabet={}", t.corpus->hash, alphabet_hex(t.corpus->alphabet)) : "";
  return fmt::format(
      "task={};policy={};init={};d_model={};heads={};layers={};seq={};batch={};steps={};warmup={};"
      "lr={};weight_decay={};clip={};seed={}{}",
      task, policy, init, d_model, heads, layers, seq, batch, steps, warmup, num(lr), num(weight_decay), num(clip),
      seed, text);
}

nlohmann::ordered_json per_head_json(const std::vector<double>& v, i64 heads) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  const auto H = static_cast<std::size_t>(std::max<i64>(heads, 1));
  for (std::size_t i = 0; i < v.size(); i += H)
    a.push_back(array(std::vector<double>(v.begin() + static_cast<long>(i),
                                          v.begin() + static_cast<long>(std::min(i + H, v.size())))));
  return a;
}

nlohmann::ordered_json to_json(const StepRecord& r, i64 heads) {
  if (r.diverged) {
    nlohmann::ordered_json j{{"step", r.step}, {"loss", io::json_number(r.loss)}, {"diverged", true}};
    if (std::isfinite(r.loss)) j["grad_norm"] = nullptr;  // the loss was finite, the gradient was not
    return j;
  }
  nlohmann::ordered_json j{{"step", r.step},
                           {"loss", io::json_number(r.loss)},
                           {"accuracy", io::json_number(r.accuracy)},
                           {"eval_loss", io::json_number(r.eval_loss)},
                           {"eval_accuracy", io::json_number(r.eval_accuracy)}};
  if (r.eval_bits_per_char) j["eval_bits_per_char"] = io::json_number(*r.eval_bits_per_char);
  if (r.eval_long_accuracy) j["eval_long_accuracy"] = io::json_number(*r.eval_long_accuracy);
  j["lr"] = io::json_number(r.lr);
  j["beta"] = per_head_json(r.beta, heads);
  j["sigma_x"] = array(r.sigma_x);
  j["sigma_wq"] = per_head_json(r.sigma_wq, heads);
  j["sigma_wk"] = per_head_json(r.sigma_wk, heads);
  j["score_std"] = per_head_json(r.score_std, heads);
  j["entropy"] = per_head_json(r.entropy, heads);
  j["max_weight"] = per_head_json(r.max_weight, heads);
  j["grad_norm_q"] = array(r.grad_norm_q);
  j["grad_norm_k"] = array(r.grad_norm_k);
  j["grad_norm_v"] = array(r.grad_norm_v);
  j["grad_norm_o"] = array(r.grad_norm_o);
  j["grad_norm"] = io::json_number(r.grad_norm);
  j["tokens_per_s"] = std::round(r.tokens_per_s);
  j["elapsed_s"] = r.elapsed_s;
  return j;
}

nlohmann::ordered_json to_json(const TrainSummary& s) {
  return {{"final", true},
          {"task", s.task},
          {"policy", s.policy},
          {"seed", s.seed},
          {"d_model", s.d_model},
          {"heads", s.heads},
          {"d_head", s.heads ? s.d_model / s.heads : 0},
          {"layers", s.layers},
          {"seq", s.seq},
          {"steps", s.steps_done},
          {"loss", io::json_number(s.loss)},
          {"accuracy", io::json_number(s.accuracy)},
          {"eval_loss", io::json_number(s.eval_loss)},
          {"eval_accuracy", io::json_number(s.eval_accuracy)},
          {"eval_bits_per_char",
           s.eval_bits_per_char ? io::json_number(*s.eval_bits_per_char) : nlohmann::ordered_json(nullptr)},
          {"eval_long_accuracy",
           s.eval_long_accuracy ? io::json_number(*s.eval_long_accuracy) : nlohmann::ordered_json(nullptr)},
          {"steps_to_threshold", s.steps_to_threshold},
          {"threshold", io::json_number(s.threshold)},
          {"diverged", s.diverged},
          {"beta", per_head_json(s.beta, s.heads)},
          {"tokens_per_s", std::round(s.tokens_per_s)},
          {"seconds", s.seconds}};
}

namespace {

double number_of(const nlohmann::ordered_json& v) { return v.is_null() ? NAN : v.get<double>(); }

std::vector<double> flat_of(const nlohmann::ordered_json& v) {
  std::vector<double> out;
  if (v.is_array())
    for (const auto& x : v) {
      if (x.is_array())
        for (const auto& y : x) out.push_back(number_of(y));
      else
        out.push_back(number_of(x));
    }
  return out;
}

std::optional<double> optional_of(const nlohmann::ordered_json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<double>();
}

template <class F>
auto parsing(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": malformed (" + e.what() + ")");
  }
}

}  // namespace

StepRecord step_record_from_json(const nlohmann::ordered_json& j, const std::string& what) {
  return parsing(what, [&] {
    StepRecord r;
    r.step = j.at("step").get<i64>();
    r.loss = number_of(j.at("loss"));
    if (j.value("diverged", false)) {
      r.diverged = true;
      if (j.contains("grad_norm")) r.grad_norm = NAN;
      return r;
    }
    r.accuracy = number_of(j.at("accuracy"));
    r.eval_loss = number_of(j.at("eval_loss"));
    r.eval_accuracy = number_of(j.at("eval_accuracy"));
    r.eval_bits_per_char = optional_of(j, "eval_bits_per_char");
    r.eval_long_accuracy = optional_of(j, "eval_long_accuracy");
    r.lr = number_of(j.at("lr"));
    r.beta = flat_of(j.at("beta"));
    r.sigma_x = flat_of(j.at("sigma_x"));
    r.sigma_wq = flat_of(j.at("sigma_wq"));
    r.sigma_wk = flat_of(j.at("sigma_wk"));
    r.score_std = flat_of(j.at("score_std"));
    r.entropy = flat_of(j.at("entropy"));
    r.max_weight = flat_of(j.at("max_weight"));
    r.grad_norm_q = flat_of(j.at("grad_norm_q"));
    r.grad_norm_k = flat_of(j.at("grad_norm_k"));
    r.grad_norm_v = flat_of(j.at("grad_norm_v"));
    r.grad_norm_o = flat_of(j.at("grad_norm_o"));
    r.grad_norm = number_of(j.at("grad_norm"));
    r.tokens_per_s = number_of(j.at("tokens_per_s"));
    r.elapsed_s = number_of(j.at("elapsed_s"));
    return r;
  });
}

TrainSummary train_summary_from_json(const nlohmann::ordered_json& j, const std::string& what) {
  return parsing(what, [&] {
    TrainSummary s;
    s.task = j.at("task").get<std::string>();
    s.policy = j.at("policy").get<std::string>();
    s.seed = j.at("seed").get<std::uint64_t>();
    s.d_model = j.at("d_model").get<i64>();
    s.heads = j.at("heads").get<i64>();
    s.layers = j.at("layers").get<i64>();
    s.seq = j.at("seq").get<i64>();
    s.steps_done = j.at("steps").get<i64>();
    s.loss = number_of(j.at("loss"));
    s.accuracy = number_of(j.at("accuracy"));
    s.eval_loss = number_of(j.at("eval_loss"));
    s.eval_accuracy = number_of(j.at("eval_accuracy"));
    s.eval_bits_per_char = optional_of(j, "eval_bits_per_char");
    s.eval_long_accuracy = optional_of(j, "eval_long_accuracy");
    s.steps_to_threshold = j.at("steps_to_threshold").get<i64>();
    s.threshold = number_of(j.at("threshold"));
    s.diverged = j.at("diverged").get<bool>();
    s.beta = flat_of(j.at("beta"));
    s.tokens_per_s = number_of(j.at("tokens_per_s"));
    s.seconds = number_of(j.at("seconds"));
    return s;
  });
}

TrainSummary train(const TrainConfig& c, const TrainHooks& hooks) {
  const Task task = parse_task(c.task, c.seq, c.corpus);
  const Policy policy = parse_policy(c.policy);
  const Init init = parse_init(c.init);
  auto positive = [](i64 v, const char* what) {
    if (v <= 0) throw Error(std::string(what) + ": must be >= 1, got " + std::to_string(v));
  };
  positive(c.d_model, "d_model");
  positive(c.heads, "heads");
  positive(c.layers, "layers");
  positive(c.batch, "batch");
  positive(c.steps, "steps");
  positive(c.log_every, "log_every");
  positive(c.eval_size, "eval_size");
  if (c.d_model % c.heads != 0)
    throw Error("d_model: " + std::to_string(c.d_model) + " is not a multiple of heads (" + std::to_string(c.heads) +
                ")");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw Error("lr: must be a finite value > 0");
  if (c.warmup < 0) throw Error("warmup: must be >= 0");
  if (c.threads < 0) throw Error("threads: must be >= 0");
  if (c.stop_at < 0 || c.stop_at > c.steps) throw Error("stop_at: must be in [0, steps]");

  const int threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  // The projections' parallel regions take this thread's OpenMP default; put it back on
  // return, so that a later run in the same process (a test, Python) with 0 still means all.
  struct RestoreThreads {
    int before = omp_get_max_threads();
    ~RestoreThreads() { omp_set_num_threads(before); }
  } restore_threads;
  omp_set_num_threads(threads);
  ModelConfig mc;
  mc.vocab = task.vocab();
  mc.max_pos = task.max_positions();
  mc.C = c.d_model;
  mc.H = c.heads;
  mc.L = c.layers;
  mc.policy = policy;
  mc.init = init;
  mc.seed = c.seed;
  mc.threads = threads;
  Model<float> model(mc);
  if (c.frozen_beta) {
    if (static_cast<i64>(c.frozen_beta->size()) != c.layers * c.heads)
      throw Error("frozen_beta: needs layers*heads = " + std::to_string(c.layers * c.heads) + " values, got " +
                  std::to_string(c.frozen_beta->size()));
    model.frozen_beta = c.frozen_beta;
  }
  const auto n = static_cast<std::size_t>(model.layout.total);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  i64 step0 = 0;
  const std::string identity = c.identity(task);
  if (hooks.resume || !c.resume.empty()) {
    const std::string where = hooks.resume ? std::string("the state given") : "'" + c.resume + "'";
    const Checkpoint ck = hooks.resume ? *hooks.resume : load_checkpoint(c.resume);
    if (ck.identity != identity)
      throw Error("checkpoint " + where + " is for another run: " + first_difference(ck.identity, identity));
    if (ck.params.size() != n || ck.score_ema.size() != model.score_ema.size())
      throw Error("checkpoint " + where + ": holds " + std::to_string(ck.params.size()) +
                  " parameters, this model has " + std::to_string(n));
    if (ck.step > c.steps) throw Error("checkpoint " + where + ": already at step " + std::to_string(ck.step));
    model.params = ck.params;
    m = ck.m;
    v = ck.v;
    model.score_ema = ck.score_ema;
    step0 = ck.step;
  } else if (c.eval_only) {
    throw Error("eval_only: needs resume (the checkpoint to evaluate)");
  }
  if (!c.save.empty()) {  // fail now, not after the training, if --save cannot be written
    io::OutputSet probe;
    probe.add(c.save, {});
  }
  auto save = [&](i64 step) {
    if (c.save.empty()) return;
    save_checkpoint(c.save, Checkpoint{identity, step, model.params, m, v, model.score_ema});
  };
  auto report = [&](const StepRecord& r) {
    if (hooks.on_log) hooks.on_log(r);
  };
  // The record of a step that diverged: its loss, and a NaN gradient norm when the loss was
  // finite (assigned, not designated: -Wmissing-field-initializers would name every field left out).
  auto diverged_record = [](i64 step, double loss, double grad_norm) {
    StepRecord r;
    r.step = step;
    r.diverged = true;
    r.loss = loss;
    r.grad_norm = grad_norm;
    return r;
  };

  // The held-out sets do not depend on --seed, so every run of a sweep is scored on the
  // same sequences; "test" is a second set for choosing on one and reporting on another.
  if (c.eval_set != "validation" && c.eval_set != "test")
    throw Error("eval_set: 'validation' or 'test', got '" + c.eval_set + "'");
  const std::uint64_t which = c.eval_set == "test" ? 5 : 3;
  Rng eval_rng = stream(kEvalSeed, which);
  const bool text = task.kind == TaskKind::text;
  const Batch ev = text ? task.held_out(c.eval_set, c.eval_size) : task.make(eval_rng, c.eval_size, c.seq, false);
  // bits per character: the loss in nats over ln 2
  auto bits = [text](double nats) { return text ? std::optional<double>(nats / std::log(2.0)) : std::nullopt; };
  Batch ev_long;
  if (task.kind == TaskKind::lengthgen) {
    Rng r = stream(kEvalSeed, which + 1);
    ev_long = task.make(r, c.eval_size, 2 * c.seq, false);
  }
  const i64 chunk = std::max<i64>(c.batch, 64);

  TrainSummary sum;
  AdamW opt;
  opt.lr = c.lr;
  opt.weight_decay = c.weight_decay;
  const i64 last = c.stop_at ? c.stop_at : c.steps;
  double train_seconds = 0;
  i64 trained_tokens = 0;
  const auto t_start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  i64 step = step0;
  for (i64 t = step0 + 1; t <= (c.eval_only ? step0 : last); ++t) {
    Rng r = stream(c.seed, 2, static_cast<std::uint64_t>(t));
    const Batch b = task.make(r, c.batch, c.seq, true);
    const bool log = t == 1 || t % c.log_every == 0 || t == c.steps;
    Stats st;
    const auto t0 = std::chrono::steady_clock::now();
    const CeResult res = model.forward(b.tokens.data(), b.targets.data(), b.pos0.empty() ? nullptr : b.pos0.data(), b.B,
                                       b.T, true, log ? &st : nullptr);
    if (!std::isfinite(res.loss)) {
      sum.diverged = true;
      report(diverged_record(t, NAN, 0.0));
      break;
    }
    model.zero_grad();
    model.backward(log ? &st : nullptr);
    const double gnorm = clip_grad_norm(model.grads.data(), model.layout.total, c.clip);
    if (!std::isfinite(gnorm)) {
      sum.diverged = true;
      report(diverged_record(t, res.loss, NAN));
      break;
    }
    const double lr = lr_at(c.lr, t, c.warmup, c.steps);
    adamw_update(model.params.data(), model.grads.data(), m.data(), v.data(), model.layout.decay.data(),
                 model.layout.total, opt, lr, t);
    train_seconds += since(t0);
    trained_tokens += b.B * b.T;
    step = t;
    sum.loss = res.loss;
    sum.accuracy = res.counted ? static_cast<double>(res.correct) / static_cast<double>(res.counted) : 0.0;
    if (hooks.on_step) hooks.on_step(t, res.loss);
    if (log) {
      const Eval e = evaluate(model, ev, chunk);
      sum.eval_loss = e.loss;
      sum.eval_accuracy = e.accuracy;
      sum.eval_bits_per_char = bits(e.loss);
      if (sum.steps_to_threshold < 0 && e.accuracy >= c.threshold) sum.steps_to_threshold = t;
      StepRecord r{.step = t,
                   .diverged = false,
                   .loss = res.loss,
                   .accuracy = sum.accuracy,
                   .eval_loss = e.loss,
                   .eval_accuracy = e.accuracy,
                   .eval_bits_per_char = sum.eval_bits_per_char,
                   .eval_long_accuracy = std::nullopt,  // lengthgen sets it below
                   .lr = lr,
                   .beta = st.beta,
                   .sigma_wq = st.sigma_wq,
                   .sigma_wk = st.sigma_wk,
                   .score_std = st.score_std,
                   .entropy = st.entropy,
                   .max_weight = st.max_weight,
                   .sigma_x = st.sigma_x,
                   .grad_norm_q = st.gq,
                   .grad_norm_k = st.gk,
                   .grad_norm_v = st.gv,
                   .grad_norm_o = st.go,
                   .grad_norm = gnorm,
                   .tokens_per_s = train_seconds > 0 ? static_cast<double>(trained_tokens) / train_seconds : 0.0,
                   .elapsed_s = since(t_start)};
      if (task.kind == TaskKind::lengthgen) {
        sum.eval_long_accuracy = evaluate(model, ev_long, chunk).accuracy;
        r.eval_long_accuracy = sum.eval_long_accuracy;
      }
      report(r);
    }
    if (!c.save.empty() && c.save_every > 0 && t % c.save_every == 0) save(t);
  }
  if (c.eval_only || sum.diverged || step == step0) {
    const Eval e = evaluate(model, ev, chunk);
    sum.eval_loss = e.loss;
    sum.eval_accuracy = e.accuracy;
    sum.eval_bits_per_char = bits(e.loss);
    if (task.kind == TaskKind::lengthgen) sum.eval_long_accuracy = evaluate(model, ev_long, chunk).accuracy;
  }
  if (!sum.diverged && step > step0) save(step);
  if (hooks.final_state) *hooks.final_state = Checkpoint{identity, step, model.params, m, v, model.score_ema};
  sum.task = c.task;
  sum.policy = policy.name();
  sum.seed = c.seed;
  sum.d_model = c.d_model;
  sum.heads = c.heads;
  sum.layers = c.layers;
  sum.seq = c.seq;
  sum.threshold = c.threshold;
  sum.steps_done = step;
  sum.seconds = since(t_start);
  sum.tokens_per_s = train_seconds > 0 ? static_cast<double>(trained_tokens) / train_seconds : 0.0;
  sum.beta = model.beta;
  return sum;
}

}  // namespace sdpa::nn
