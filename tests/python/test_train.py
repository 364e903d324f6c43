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
