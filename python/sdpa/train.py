"""sdpa.train: the training lab (docs/training.md) from Python.

    log, summary = sdpa.train.run(task="sort", policy="adaptive", steps=400)
    [row["beta"] for row in log]          # beta per layer and head, every logged step
    result = sdpa.train.sweep(policies=["inv_sqrt_dk", "adaptive"], seeds=[1, 2])
    print(result["table"])                # the table `sdpa sweep` prints

`run` trains one small transformer with the library's hand-written backward passes and
returns what `sdpa train` prints: one dict per logged step (step, loss, accuracy,
eval_loss, eval_accuracy, beta, sigma_x, sigma_wq, sigma_wk, score_std, entropy,
max_weight, grad norms, ...), and the summary dict of its closing line (`steps_done` is
its `steps`; `beta` there is flat, layer-major). `sweep` runs `sdpa sweep`'s grid in this
process and returns the dict `sdpa sweep` writes as sweep.json (its "table" is the text
table the command prints). Options left out take the library's defaults (those of `sdpa
train` and `sdpa sweep`). Deterministic for a seed, whatever the thread count. Bad
arguments raise sdpa.Error (a ValueError) naming the option, or TypeError. The GIL is
released while it trains.
"""

import json

from . import _ext

# The TrainConfig fields a caller may set (run and sweep); the rest are for the CLI.
TRAIN_OPTIONS = ("task", "corpus", "policy", "init", "d_model", "heads", "layers", "seq", "batch", "steps", "warmup", "lr",
                 "weight_decay", "clip", "seed", "threads", "log_every", "eval_size", "threshold")


def _configure(config, options, allowed):
    for name, value in options.items():
        if name not in allowed:
            raise TypeError(f"unknown option {name!r} (options: {', '.join(allowed)})")
        if value is None:
            continue  # the library's default
        try:
            setattr(config, name, value)
        except TypeError:
            raise TypeError(f"{name}: {value!r} has the wrong type "
                            f"(the default is {getattr(config, name)!r})") from None


def run(**options):
    """Trains one model; returns (log, summary): a list of per-step dicts and a dict.

    Options (any left out take `sdpa train`'s defaults): task (mqar | copy | reverse |
    sort | lengthgen | text), corpus (text: a UTF-8 file; default Shakespeare), policy (inv_sqrt_dk | none | inv_dk | fixed:<beta> | learned |
    qk_norm | log_n | adaptive | adaptive_scores), init, d_model, heads, layers, seq,
    batch, steps, warmup, lr, weight_decay, clip, seed, threads (0 = all cores),
    log_every, eval_size, threshold.
    """
    config = _ext.TrainConfig()
    _configure(config, options, TRAIN_OPTIONS)
    lines, final = _ext.train_run(config)
    summary = json.loads(final)
    summary.pop("final", None)
    summary["steps_done"] = summary["steps"]
    summary["beta"] = [b for layer in summary["beta"] for b in layer]  # flat: (layer, head) row-major
    return [json.loads(line) for line in lines], summary


def sweep(*, policies=None, seeds=None, d_heads=None, widths=None, inits=None, lrs=None, ensemble=True, jobs=0,
          store="", budget_s=0.0, **options):
    """Trains every policy x width x head size x init x lr x seed; returns sweep.json's dict.

    policies, seeds, d_heads: the grid (defaults: `sdpa sweep`'s, 8 policies x d_k {8, 32}
    x seeds {1, 2, 3} on sort at width 64; d_head 0: one head as wide as the model);
    widths, inits, lrs: more axes (default: the d_model, init and lr options); store: a
    directory where finished runs are kept and found again (resume); budget_s: a time
    limit the grid is cut to fit (the cuts are in "budget_cuts"); ensemble: evaluate the seed note's ensemble
    rule when "adaptive" is swept; jobs: runs at once (0: min(2, cores); results do not
    depend on it); other options as for run() (not policy, heads or seed, set per run).
    Keys: table (the text `sdpa sweep` prints), summary, ensemble, runs (each with its
    log and its final summary), and the configuration.
    """
    spec = _ext.SweepSpec.defaults()
    base = spec.base
    _configure(base, options, tuple(o for o in TRAIN_OPTIONS if o not in ("policy", "heads", "seed")))
    spec.base = base
    _configure(spec, {"policies": None if policies is None else list(policies),
                      "seeds": None if seeds is None else list(seeds),
                      "d_heads": None if d_heads is None else list(d_heads),
                      "widths": None if widths is None else list(widths),
                      "inits": None if inits is None else list(inits), "lrs": None if lrs is None else list(lrs),
                      "ensemble": ensemble, "jobs": jobs, "store": store, "budget_s": budget_s},
               ("policies", "seeds", "d_heads", "widths", "inits", "lrs", "ensemble", "jobs", "store", "budget_s"))
    return json.loads(_ext.train_sweep(spec))
