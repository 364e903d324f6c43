#!/usr/bin/python3
"""Render an `sdpa sweep` (its sweep.json) as one self-contained HTML page.

Run by `sdpa sweep` with Debian's /usr/bin/python3 and python3-matplotlib; reads --data,
prints the page on stdout (the caller writes it atomically). Plots are PNGs embedded
as base64, so the page has no other files.
"""
import argparse
import base64
import html
import io
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
          "#bcbd22"]


def fig_to_img(fig, alt):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def flat_mean(v):
    """Mean of a number or a (nested) list of numbers; None if nothing finite."""
    xs = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, (int, float)) and math.isfinite(x):
            xs.append(float(x))

    walk(v)
    return sum(xs) / len(xs) if xs else None


def series(run, key, reduce=flat_mean):
    steps, ys = [], []
    for row in run["log"]:
        if key in row and row[key] is not None:
            y = reduce(row[key])
            if y is not None:
                steps.append(row["step"])
                ys.append(y)
    return steps, ys


def mean_curve(runs, key, reduce=flat_mean):
    """Per step: mean, min, max over the runs (seeds) that logged it."""
    by_step = {}
    for r in runs:
        for s, y in zip(*series(r, key, reduce)):
            by_step.setdefault(s, []).append(y)
    steps = sorted(by_step)
    return (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def group_of(r):
    """The configuration a run or summary row belongs to: everything but policy and seed."""
    dk = r.get("d_head") or r.get("d_model")
    return (r.get("d_model"), dk, r.get("init"), r.get("lr"))


def group_title(g):
    d_model, dk, init, lr = g
    return f"d_model {d_model}, d_k {dk}" + (f", {init}" if init else "") + (f", lr {lr:g}" if lr else "")


def loss_unit(doc):
    """(factor, unit): the text task's losses are shown in bits per character (the unit of its tables and of
    docs/training.md), the others in nats."""
    return (1 / math.log(2), "bits/char") if doc.get("task") == "text" else (1.0, "nats")


def panel_grid(doc, key, title, ylabel, log=False, reduce=flat_mean, scale=1.0):
    groups = list(dict.fromkeys(group_of(r) for r in doc["runs"]))
    policies = list(dict.fromkeys(r["policy"] for r in doc["runs"]))
    cols = min(len(groups), 3)
    rows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for k, g in enumerate(groups):
        ax = axes[k // cols][k % cols]
        for i, p in enumerate(policies):
            runs = [r for r in doc["runs"] if r["policy"] == p and group_of(r) == g]
            s, m, lo, hi = mean_curve(runs, key, reduce)
            if not s:
                continue
            m, lo, hi = ([y * scale for y in ys] for ys in (m, lo, hi))
            ax.plot(s, m, color=COLORS[i % len(COLORS)], label=p, lw=1.5)
            ax.fill_between(s, lo, hi, color=COLORS[i % len(COLORS)], alpha=0.15, lw=0)
        ax.set_title(f"{title}, {group_title(g)}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for k in range(len(groups), rows * cols):
        axes[k // cols][k % cols].axis("off")
    axes[0][min(len(groups), cols) - 1].legend(fontsize=8, loc="best")
    return fig_to_img(fig, title)


def paired_plot(doc):
    """Each policy's paired difference against inv_sqrt_dk (same seeds) with its 95 % interval."""
    rows = [r for r in doc["summary"] if r.get("paired_difference_n")]
    if not rows:
        return "<p>No paired differences (they need inv_sqrt_dk in the sweep and a second policy).</p>"
    unit, unit_name = loss_unit(doc)
    groups = list(dict.fromkeys(group_of(r) for r in rows))
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(rows) + 1.5))
    labels = []
    for y, r in enumerate(rows):
        m = r["paired_difference_mean"] * unit
        ci = r.get("paired_difference_ci95")
        color = COLORS[groups.index(group_of(r)) % len(COLORS)]
        if ci is not None:
            ax.errorbar(m, y, xerr=ci * unit, fmt="o", color=color, capsize=3)
        else:
            ax.plot(m, y, "o", color=color)
        labels.append(f"{r['policy']} ({group_title(group_of(r))})")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"held-out loss ({unit_name}) minus inv_sqrt_dk's, same seed")
    ax.grid(alpha=0.3, axis="x")
    return ("<p>An interval that excludes 0 is a difference the seeds agree on; one that contains 0 is "
            "within the noise of these seeds.</p>" + fig_to_img(fig, "paired differences"))


def lr_section(doc):
    """Held-out loss at the end against the peak learning rate: one panel per (width, d_k, init), one line per
    policy, the 95 % interval over seeds as error bars; empty when the sweep has one learning rate."""
    rows = [r for r in doc["summary"] if r.get("lr")]
    if len({r["lr"] for r in rows}) < 2:
        return ""
    unit, unit_name = loss_unit(doc)
    panels = list(dict.fromkeys(group_of(r)[:3] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    cols = min(len(panels), 3)
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4 * nrows), squeeze=False)
    best = []
    for k, g in enumerate(panels):
        ax = axes[k // cols][k % cols]
        for i, p in enumerate(policies):
            cells = sorted((r for r in rows if r["policy"] == p and group_of(r)[:3] == g), key=lambda r: r["lr"])
            # a cell where a seed diverged is left out of the line (its mean covers only the others) and named
            # in the label
            finite = [r for r in cells if r.get("eval_loss_mean") is not None and math.isfinite(r["eval_loss_mean"])
                      and not r.get("diverged")]
            if not cells:
                continue
            lost = [f"{r.get('diverged')}/{r.get('runs')} at lr {r['lr']:g}" for r in cells if r not in finite]
            label = p + (f" (diverged: {', '.join(lost)})" if lost else "")
            xs = [r["lr"] for r in finite]
            ys = [r["eval_loss_mean"] * unit for r in finite]
            err = [(r.get("eval_loss_ci95") or 0.0) * unit for r in finite]
            ax.errorbar(xs, ys, yerr=err, color=COLORS[i % len(COLORS)], marker="o", capsize=3, lw=1.5, label=label)
            # the library names the best lr and pairs every other lr with it, seed by seed
            for top in (r for r in cells if r.get("best_lr")):
                ax.plot([top["lr"]], [top["eval_loss_mean"] * unit], "*", ms=14, color=COLORS[i % len(COLORS)])
                others = "; ".join(f"{r['lr']:g}: {ci(r, 'vs_best_lr', unit)}" if r.get("vs_best_lr_n")
                                   else f"{r['lr']:g}: –" for r in cells if r is not top)
                best.append((group_title(g + (None,)), p, top["lr"], ci(top, "eval_loss", unit), others))
        ax.set_xscale("log")
        lrs = sorted({r["lr"] for r in rows})
        ax.set_xticks(lrs, [f"{x:g}" for x in lrs])
        ax.minorticks_off()
        ax.set_title(f"held-out loss against lr, {group_title(g + (None,))}", fontsize=9)
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel(f"held-out loss ({unit_name}), end of training")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for k in range(len(panels), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    head = "".join(f"<th>{h}</th>" for h in ["configuration", "policy", "best lr", "its loss (95 %)",
                                              "each other lr minus the best, same seed (95 %)"])
    body = "".join(f"<tr><td>{html.escape(g)}</td><td>{html.escape(p)}</td><td>{lr:g}</td><td>{html.escape(v)}</td>"
                   f"<td>{html.escape(o)}</td></tr>" for g, p, lr, v, o in best)
    return ("<h2>Learning rate</h2><p>Points: mean over seeds; bars: 95 % interval; star: the policy's best lr "
            "(lowest mean among the lrs where no seed diverged). Another lr is worse than the best only where its "
            "paired difference (last column) excludes 0.</p>"
            + fig_to_img(fig, "held-out loss against the learning rate") + f"<table><tr>{head}</tr>{body}</table>")


def fmt(x, d=4):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{d}g}" if isinstance(x, float) else str(x)


def pm(r, key):
    """'mean ± sd' over seeds, or the mean alone when one seed gives no spread."""
    m, s = r.get(key + "_mean"), r.get(key + "_sd")
    return fmt(m) if s is None else f"{fmt(m)} ± {fmt(s, 2)}"


def ci(r, key, unit=1.0):
    """'mean ± 95 % half-width' in `unit`, or the mean alone."""
    m, h = r.get(key + "_mean"), r.get(key + "_ci95")
    if m is None:
        return "–"
    return fmt(m * unit) if h is None else f"{fmt(m * unit)} ± {fmt(h * unit, 2)}"


def summary_table(doc):
    unit, unit_name = loss_unit(doc)
    name = "eval bits/char" if unit_name == "bits/char" else "eval loss"
    cols = [("policy", lambda r: fmt(r.get("policy"))), ("d_model", lambda r: fmt(r.get("d_model"))),
            ("d_k", lambda r: fmt(r.get("d_head") or r.get("d_model"))), ("init", lambda r: fmt(r.get("init"))),
            ("lr", lambda r: fmt(r.get("lr"))),
            ("runs", lambda r: fmt(r.get("runs"))), ("diverged", lambda r: fmt(r.get("diverged"))),
            (name + " (95 %)", lambda r: ci(r, "eval_loss", unit)),
            ("Δ vs inv_sqrt_dk (paired, 95 %)",
             lambda r: ci(r, "paired_difference", unit) if r.get("paired_difference_n") else ""),
            ("eval accuracy", lambda r: pm(r, "eval_accuracy")),
            ("reached threshold", lambda r: f"{fmt(r.get('reached'))}/{fmt(r.get('runs'))}"),
            ("steps to threshold", lambda r: fmt(r.get("steps_to_threshold_mean"))),
            ("final β (mean)", lambda r: fmt(r.get("beta_mean")))]
    if any(r.get("long_accuracy_mean") is not None for r in doc["summary"]):
        cols.append(("accuracy at 2n", lambda r: pm(r, "long_accuracy")))
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(get(r))}</td>" for _, get in cols) + "</tr>"
                   for r in doc["summary"])
    seeds = "" if any(r.get("eval_loss_sd") is not None for r in doc["summary"]) else \
        "<p>One seed per cell: no spread to show (± is the sample standard deviation over seeds).</p>"
    return f"<table><tr>{head}</tr>{body}</table>{seeds}"


def ensemble_table(doc):
    if not doc.get("ensemble"):
        return "<p>No ensemble evaluation in this sweep (it needs the adaptive policy).</p>"
    keys = ["group", "seed", "best_seed", "own_test_loss", "own_test_accuracy", "ensemble_test_loss",
            "ensemble_test_accuracy"]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(k)))}</td>" for k in keys) + "</tr>"
                   for r in doc["ensemble"])
    betas = "".join(f"<li>{html.escape(str(r.get('group', r['d_head'])))}: β from seed {r['best_seed']} = "
                    f"{html.escape(', '.join(f'{b:.4g}' for b in r['ensemble_beta']))}</li>"
                    for r in {r.get('group', r['d_head']): r for r in doc['ensemble']}.values())
    return f"<table><tr>{head}</tr>{body}</table><ul>{betas}</ul>"


def samples_section(doc):
    """One generated text per policy (text task): what each policy's model learned to write."""
    if doc.get("task") != "text":
        return ""
    cfg = doc.get("sample", {})
    how = (f"Prompt {cfg.get('prompt', '')!r}, {cfg.get('tokens')} characters at temperature "
           f"{cfg.get('temperature')} with sampling seed {cfg.get('seed')} — the same for every policy — by the "
           "final model of the policy's first run (nn::sample, what `sdpa sample` prints).")
    if not doc.get("samples"):
        return f"<h2>Samples</h2><p>{html.escape(how)} No sample: every sampled run diverged.</p>"
    items = "".join(f"<h3>{html.escape(s['policy'])}</h3><p>{html.escape(s['group'])}, seed {s['seed']}</p>"
                    f"<pre>{html.escape(s['text'])}</pre>" for s in doc["samples"])
    return f"<h2>Samples</h2><p>{html.escape(how)}</p>{items}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    with open(args.data) as f:
        doc = json.load(f)
    widths = ", ".join(str(w) for w in doc.get("widths", [doc["d_model"]]))
    title = (f"sdpa sweep: {doc['task']}, d_model {widths}, {doc['layers']} layers, seq {doc['seq']}, "
             f"{doc['steps']} steps")
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(doc['runs'])} runs, {doc['jobs']} at a time, {doc['threads']} thread(s) each; "
        f"{doc['seconds']:.0f} s in all. Bands: min–max over seeds; lines: mean. "
        f"Held-out sets are the same for every run. Reading: docs/training.md.</p>",
        "<h2>Summary</h2>", summary_table(doc),
        "".join(f"<p>--budget: {html.escape(c)}</p>" for c in doc.get("budget_cuts", [])),
        "<h2>Paired differences against 1/√d_k</h2>", paired_plot(doc),
        f"<pre>{html.escape(doc['table'])}</pre>",
        lr_section(doc),
        "<h2>Learning curves</h2>",
        panel_grid(doc, "eval_loss", "held-out loss", f"cross-entropy ({loss_unit(doc)[1]})", log=True,
                   scale=loss_unit(doc)[0]),
        panel_grid(doc, "eval_accuracy", "held-out accuracy", "accuracy"),
        "<h2>Temperature β and what the adaptive rules measure</h2>",
        "<p>β: mean over layers and heads. σ_X: std of the attention input (LayerNorm output); σ_Wq, σ_Wk: std of "
        "the entries of each head's projection; raw score std: std of q·k over the causal pairs of four "
        "sequences of the batch.</p>",
        panel_grid(doc, "beta", "β", "β (mean over heads)", log=True),
        panel_grid(doc, "sigma_x", "σ_X", "σ_X"),
        panel_grid(doc, "sigma_wq", "σ_Wq", "σ_Wq"),
        panel_grid(doc, "sigma_wk", "σ_Wk", "σ_Wk"),
        panel_grid(doc, "score_std", "raw score std", "std(q·k)", log=True),
        "<h2>Attention</h2>",
        panel_grid(doc, "entropy", "attention entropy", "nats (mean over queries)"),
        panel_grid(doc, "max_weight", "max attention weight", "mean max_j p_ij"),
        panel_grid(doc, "grad_norm_q", "‖dL/dq‖", "norm", log=True),
        samples_section(doc),
        "<h2>The ensemble rule</h2>",
        "<p>For each head size, the adaptive run with the lowest validation loss gives its final β (per layer and "
        "head); every adaptive run is then scored on a separate test set with its own (recomputed) adaptive β and "
        "with that frozen ensemble β.</p>",
        ensemble_table(doc),
    ]
    css = ("body{font-family:sans-serif;max-width:1300px;margin:auto;padding:1em}table{border-collapse:collapse;"
           "font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}")
    sys.stdout.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                     f"<style>{css}</style></head><body>{''.join(parts)}</body></html>\n")


if __name__ == "__main__":
    main()
