"""sdpa.lab: the lab's experiments reach Python as tables with the CLI's columns and verdicts."""

import json

import numpy as np
import pytest

import sdpa
from npref import EPS32


def test_lists_every_experiment():
    assert sdpa.lab.experiments() == ["variance", "scaling", "general", "matrix", "puzzle", "softmax", "saturation",
                                      "gradients", "alternatives", "projections", "precision", "sinks",
                                      "kvquant"]


VERDICT_KEYS = {"verdict", "outcome", "expected", "measured", "tolerance"}


def test_describe_is_the_registry():
    entry = sdpa.lab.describe("variance")
    assert entry["name"] == "variance" and entry["takes_dists"] is True
    assert entry["heading"] and entry["seeds"] and entry["help"] and entry["claim"]
    assert [sdpa.lab.describe(n)["takes_dists"] for n in sdpa.lab.experiments()].count(True) == 1
    with pytest.raises(ValueError, match=r"^experiment: unknown lab experiment 'nope'"):
        sdpa.lab.describe("nope")


@pytest.mark.parametrize("name", ["softmax", "scaling", "puzzle"])
def test_every_table_carries_its_claim_level_verdict(name):
    t = sdpa.lab.run(name, samples=300)
    assert set(t.verdict) == VERDICT_KEYS
    assert all(isinstance(v, str) and v for v in t.verdict.values()), t.verdict
    assert t.verdict["outcome"] in ("holds", "fails", "holds only")
    assert t.verdict["verdict"].startswith(t.verdict["outcome"])
    # "expected" is the registry's claim, word for word
    assert t.verdict["expected"] == sdpa.lab.describe(name)["claim"]
    # these three hold at any seed: the softmax values are exact, the others judged at 4 standard errors
    assert t.verdict["verdict"] == "holds", t.verdict


def test_a_qualified_verdict_says_where_the_claim_holds():
    t = sdpa.lab.run("gradients", samples=100)
    assert t.verdict["outcome"] == "holds only"
    assert t.verdict["verdict"] == "holds only for the gradient w.r.t. the logits (and q·k)"
    assert "0.5" in t.verdict["tolerance"]  # kVanishedFraction, stated where it decides


def test_softmax_values_are_the_kernels():
    t = sdpa.lab.run("softmax")
    assert t.name == "softmax" and len(t) > 0
    for row in t:
        z = np.array(json.loads(row["logits"]), dtype=np.float64) * row["beta"]
        p = np.exp(z - z.max())
        p /= p.sum()
        # The lab's value comes from sdpa::forward in fp32 (q = [1], k_j = [z_j], v = I): the
        # forward floor 8 eps (1 + smax) max|v| with smax = max |beta z_j|.
        assert abs(row["value"] - p[row["index"]]) <= 8 * EPS32 * (1 + np.abs(z).max()), row


def test_variance_follows_its_arguments_and_seed():
    a = sdpa.lab.run("variance", seed=3, samples=500, max_dk=16, dists=["gaussian", "rademacher"])
    assert a.columns[:3] == ("dist", "d_k", "samples")
    assert [(r["dist"], r["d_k"]) for r in a] == [(d, 2 ** i) for d in ("gaussian", "rademacher") for i in range(5)]
    assert set(a["samples"].tolist()) == {500}
    b = sdpa.lab.run("variance", seed=3, samples=500, max_dk=16, dists=["gaussian", "rademacher"])
    c = sdpa.lab.run("variance", seed=4, samples=500, max_dk=16, dists=["gaussian", "rademacher"])
    assert a.rows == b.rows  # deterministic for a seed
    assert not np.array_equal(a["var"], c["var"])
    # Var(q.k) = d_k: each estimate within the lab's own verdict band (4 standard errors).
    for r in a:
        se = (r["var_hi"] - r["var_lo"]) / (2 * 1.959964)
        assert abs(r["var"] - r["var_expected"]) <= 4 * se + 1e-12, r


def test_columns_as_numpy_arrays():
    t = sdpa.lab.run("variance", samples=100, max_dk=4, dists="uniform")
    cols = t.to_numpy()
    assert cols["d_k"].dtype == np.int64 and cols["var"].dtype == np.float64 and cols["dist"].dtype == object
    assert cols["d_k"].tolist() == [1, 2, 4]
    with pytest.raises(KeyError, match="nope"):
        t["nope"]


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(experiment="varience"), ValueError, r"^experiment: unknown lab experiment 'varience'"),
    (dict(experiment="variance", dists=["cauchy"]), ValueError, r"^dists: unknown distribution 'cauchy'"),
    (dict(experiment="softmax", max_dk=8), ValueError, r"^dists, max_dk: only the 'variance' experiment"),
    (dict(experiment="scaling", samples=-1), ValueError, r"^samples: must be >= 0"),
    (dict(experiment="scaling", seed=1.5), TypeError, r"^seed:"),
])
def test_errors_name_the_argument(kwargs, exc, match):
    name = kwargs.pop("experiment")
    with pytest.raises(exc, match=match):
        sdpa.lab.run(name, **kwargs)


def test_report_is_the_lab_libraries_document():
    # What `sdpa lab report --samples 20` writes as lab.json, built by the lab library: every
    # experiment in the registry's order, each with its table, verdict and the page's text (a draft
    # size: the document's shape is checked here; `sdpa lab report` at the defaults in cli.lab_report).
    doc = sdpa.lab.report(seed=3, samples=20)
    assert doc["version"] == sdpa.__version__ and doc["isa"] == sdpa.active_isa() and doc["seed"] == 3
    assert doc["samples"] == 20
    assert [e["name"] for e in doc["experiments"]] == sdpa.lab.experiments()
    for e in doc["experiments"]:
        assert set(VERDICT_KEYS) <= set(e) and all(isinstance(e[k], str) and e[k] for k in VERDICT_KEYS), e["name"]
        assert e["heading"] and e["discussion"] and e["seconds"] >= 0 and e["rows"], e["name"]
    assert doc["experiments_seconds"] >= sum(e["seconds"] for e in doc["experiments"]) * 0.99
    with pytest.raises(ValueError, match="^seed"):
        sdpa.lab.report(seed=-1)
    with pytest.raises(ValueError, match="^samples"):
        sdpa.lab.report(samples=-1)
    with pytest.raises(TypeError, match="^samples"):
        sdpa.lab.report(samples=2.5)
