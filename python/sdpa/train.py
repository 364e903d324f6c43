"""sdpa.train: the training lab (docs/training.md) from Python.

    log, summary = sdpa.train.run(task="sort", policy="adaptive", steps=400)
    [row["beta"] for row in log]          # beta per layer and head, every logged step

`run` trains one small transformer with the library's hand-written backward passes and
returns what `sdpa train` prints: one dict per logged step (step, loss, accuracy,
eval_loss, eval_accuracy, beta, sigma_x, sigma_wq, sigma_wk, score_std, entropy,
max_weight, grad norms, ...), and a summary dict (the closing line's run description and
figures; `beta` there is flat, layer-major). Deterministic for a seed. Bad
arguments raise sdpa.Error (a ValueError) naming the option.
"""

import json

from . import _ext

SUMMARY_KEYS = ("steps_done", "loss", "accuracy", "eval_loss", "eval_accuracy", "steps_to_threshold", "diverged",
                "tokens_per_s", "seconds", "beta")


def run(task="mqar", policy="inv_sqrt_dk", *, init="xavier", d_model=128, heads=1, layers=2, seq=16, batch=32,
        steps=1000, warmup=100, lr=1e-3, seed=1, threads=1, log_every=25):
    """Trains one model; returns (log, summary): a list of per-step dicts and a dict.

    task: mqar | copy | reverse | sort | lengthgen; policy: inv_sqrt_dk | none | inv_dk |
    fixed:<beta> | learned | qk_norm | log_n | adaptive | adaptive_scores (docs/training.md).
    The GIL is released while it trains.
    """
    for name, value in (("d_model", d_model), ("heads", heads), ("layers", layers), ("seq", seq), ("batch", batch),
                        ("steps", steps), ("log_every", log_every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: must be an int >= 1, got {value!r}")
    if not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads: must be an int >= 0 (0 = all), got {threads!r}")
    lines, summary = _ext.train_run(str(task), str(policy), str(init), d_model, heads, layers, seq, batch, steps,
                                    int(warmup), float(lr), int(seed), threads, log_every)
    rows = [json.loads(line) for line in lines]
    log = [r for r in rows if "step" in r]  # sdpa train's per-step lines
    final = next((r for r in rows if r.get("final")), {})  # and its closing line
    final.pop("final", None)
    return log, {**final, **dict(zip(SUMMARY_KEYS, summary))}  # beta flat: (layer, head) row-major
