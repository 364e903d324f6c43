"""sdpa.train from Python: the same runs as `sdpa train`, deterministic, errors named."""
import math

import pytest

import sdpa

TINY = dict(task="sort", d_model=16, heads=2, layers=1, seq=8, batch=8, steps=12, warmup=2, log_every=4, threads=1)


def test_log_and_summary_shape():
    log, summary = sdpa.train.run(policy="adaptive", **TINY)
    assert [row["step"] for row in log] == [1, 4, 8, 12]
    for key in ("loss", "accuracy", "beta", "sigma_x", "sigma_wq", "sigma_wk", "score_std", "entropy", "max_weight"):
        assert key in log[-1], key
    assert summary["steps_done"] == 12
    assert len(summary["beta"]) == TINY["layers"] * TINY["heads"]
    assert all(math.isfinite(b) and b > 0 for b in summary["beta"])
    assert not summary["diverged"]


def test_deterministic_and_seed_matters():
    a, _ = sdpa.train.run(policy="inv_sqrt_dk", seed=3, **TINY)
    b, _ = sdpa.train.run(policy="inv_sqrt_dk", seed=3, **TINY)
    c, _ = sdpa.train.run(policy="inv_sqrt_dk", seed=4, **TINY)
    wall_clock = ("tokens_per_s", "seconds", "elapsed_s")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in wall_clock} for r in rows]
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)


def test_fixed_policy_reports_its_beta():
    log, summary = sdpa.train.run(policy="fixed:0.3", **TINY)
    assert summary["beta"] == pytest.approx([0.3] * 2)


def test_bad_arguments_name_the_option():
    with pytest.raises(ValueError, match="policy"):
        sdpa.train.run(policy="warm", **TINY)
    with pytest.raises(ValueError, match="steps"):
        sdpa.train.run(**{**TINY, "steps": 0})


SWEEP = dict(d_model=16, layers=1, seq=8, batch=4, steps=8, warmup=2, eval_size=8, log_every=4)


def test_sweep_returns_the_cli_document():
    result = sdpa.train.sweep(policies=["inv_sqrt_dk", "adaptive"], seeds=[1, 2], d_heads=[8], **SWEEP)
    assert [(r["policy"], r["seed"]) for r in result["runs"]] == [("inv_sqrt_dk", 1), ("inv_sqrt_dk", 2),
                                                                   ("adaptive", 1), ("adaptive", 2)]
    assert [row["step"] for row in result["runs"][0]["log"]] == [1, 4, 8]
    assert result["runs"][0]["final"]["heads"] == 2
    assert len(result["summary"]) == 2 and len(result["ensemble"]) == 2
    for cell in result["summary"]:
        losses = [r["final"]["eval_loss"] for r in result["runs"] if r["policy"] == cell["policy"]]
        assert cell["eval_loss_mean"] == pytest.approx(sum(losses) / len(losses), rel=1e-12)
    assert result["table"].startswith("sdpa sweep: task sort d_model 16")
    assert "ensemble rule" in result["table"]


def test_sweep_defaults_are_the_librarys():
    spec = sdpa._ext.SweepSpec.defaults()
    assert spec.base.task == "sort" and spec.base.d_model == 64
    assert len(spec.policies) == 8 and list(spec.seeds) == [1, 2, 3] and list(spec.d_heads) == [8, 32]


def test_sweep_results_do_not_depend_on_jobs():
    wall_clock = ("tokens_per_s", "seconds", "elapsed_s", "train_seconds", "table", "jobs", "threads")

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in wall_clock}
        return [strip(v) for v in x] if isinstance(x, list) else x

    a = sdpa.train.sweep(policies=["adaptive"], seeds=[1, 2], d_heads=[8], jobs=1, threads=1, **SWEEP)
    b = sdpa.train.sweep(policies=["adaptive"], seeds=[1, 2], d_heads=[8], jobs=2, threads=1, **SWEEP)
    assert strip(a) == strip(b)


def test_sweep_errors_name_the_option():
    with pytest.raises(ValueError, match="does not divide"):
        sdpa.train.sweep(d_heads=[5], **SWEEP)
    with pytest.raises(ValueError, match="^policies: "):
        sdpa.train.sweep(policies=["warm"], **SWEEP)
    with pytest.raises(TypeError, match="unknown option 'policy'"):
        sdpa.train.sweep(policy="adaptive", **SWEEP)
    with pytest.raises(TypeError, match="steps"):
        sdpa.train.sweep(steps="many")
    # The library names each parameter as Python does (the command line says its flags instead).
    with pytest.raises(ValueError, match="^d_model: 16 is not a multiple of heads"):
        sdpa.train.run(d_model=16, heads=3, steps=1)
    with pytest.raises(ValueError, match="^lr: "):
        sdpa.train.run(lr=-1.0, steps=1)
    with pytest.raises(ValueError, match="^budget_s: "):
        sdpa.train.sweep(budget_s=-1.0, d_heads=[8], **SWEEP)


def test_text_task_and_a_stored_sweep(tmp_path):
    corpus = tmp_path / "fox.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    log, summary = sdpa.train.run(task="text", corpus=str(corpus), d_model=16, heads=2, layers=1, seq=16, batch=4,
                                  steps=4, warmup=2, eval_size=4, log_every=2)
    assert summary["task"] == "text"
    assert summary["eval_bits_per_char"] == pytest.approx(summary["eval_loss"] / math.log(2), rel=1e-12)
    store = tmp_path / "runs"
    a = sdpa.train.sweep(policies=["inv_sqrt_dk", "inv_dk"], seeds=[1, 2], d_heads=[8], store=str(store), **SWEEP)
    b = sdpa.train.sweep(policies=["inv_sqrt_dk", "inv_dk"], seeds=[1, 2], d_heads=[8], store=str(store), **SWEEP)
    assert len(list(store.glob("*.json"))) == 4
    assert a["runs_from_store"] == 0 and b["runs_from_store"] == 4
    assert [r["final"]["eval_loss"] for r in a["runs"]] == [r["final"]["eval_loss"] for r in b["runs"]]
    assert b["summary"][1]["paired_difference_n"] == 2
    with pytest.raises(Exception, match="^corpus: "):
        sdpa.train.run(task="text", corpus=str(tmp_path / "missing.txt"))
