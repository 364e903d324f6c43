#!/usr/bin/python3
"""Render the sdpa lab's tables (JSON from `sdpa lab report`) as one self-contained HTML page.

Run by `sdpa lab report` with Debian's /usr/bin/python3 and python3-matplotlib; reads
--data, prints the page on stdout (the caller writes it atomically). Plots are PNGs
embedded as base64, so the page has no other files.

This script only draws. Which experiments there are, their headings, claims, verdicts,
tolerances and measured summaries all come from lab.json, decided in C++ (src/lab/):
nothing here judges a number.
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

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def fig_to_img(fig, alt):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def col(rows, key, **where):
    return [r[key] for r in rows if all(r.get(k) == v for k, v in where.items())]


def fmt(x, digits=4):
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        return f"{x:.{digits}g}"
    return str(x)


def table_html(rows, keep=None):
    if not rows:
        return ""
    keys = keep or list(rows[0].keys())
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f'<td class="{"v-" + str(r[k]) if k == "verdict" else ""}">{html.escape(fmt(r[k]))}</td>'
                         for k in keys) + "</tr>"
        for r in rows)
    return f'<details><summary>the numbers ({len(rows)} rows)</summary><table><tr>{head}</tr>{body}</table></details>'


def errorbar(ax, x, y, lo, hi, **kw):
    ax.errorbar(x, y, yerr=[[a - b for a, b in zip(y, lo)], [b - a for a, b in zip(y, hi)]], capsize=3, marker="o",
                ms=4, **kw)


# ---- one function per experiment that has plots: returns [images] ----------------------------------------

def plot_variance(rows):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, dist in enumerate(dict.fromkeys(col(rows, "dist"))):
        d = col(rows, "d_k", dist=dist)
        errorbar(axes[0], d, col(rows, "var", dist=dist), col(rows, "var_lo", dist=dist), col(rows, "var_hi", dist=dist),
                 label=dist, color=COLORS[i % len(COLORS)], alpha=0.8)
        errorbar(axes[1], d, col(rows, "var_scaled", dist=dist), col(rows, "var_scaled_lo", dist=dist),
                 col(rows, "var_scaled_hi", dist=dist), label=dist, color=COLORS[i % len(COLORS)], alpha=0.8)
    dk = sorted(set(col(rows, "d_k")))
    axes[0].plot(dk, dk, "k--", label="d_k (claim)")
    axes[0].set(xscale="log", yscale="log", xlabel="d_k", ylabel="Var(q·k)", title="unscaled: variance grows like d_k")
    axes[1].axhline(1, color="k", ls="--", label="1 (claim)")
    axes[1].set(xscale="log", xlabel="d_k", ylabel="Var(q·k/√d_k)", title="scaled by 1/√d_k: variance 1")
    for ax in axes:
        ax.legend(fontsize=8)
    return [fig_to_img(fig, "variance against d_k")]


def plot_general(rows):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"μ=({r['mu_x']:g},{r['mu_y']:g})\nσ=({r['sigma_x']:g},{r['sigma_y']:g})" for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["var_scaled"] for r in rows], 0.4, label="measured Var(q·k/√d_k)")
    ax.bar([i + 0.2 for i in x], [r["var_scaled_expected"] for r in rows], 0.4, label="formula")
    ax.axhline(1, color="k", ls="--", lw=1)
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set(yscale="log", ylabel="variance after 1/√d_k", title="1/√d_k normalises only zero-mean, unit-variance entries")
    ax.legend(fontsize=8)
    return [fig_to_img(fig, "general formula")]


def plot_puzzle(rows):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    n = col(rows, "n")
    axes[0].fill_between(n, col(rows, "q05"), col(rows, "q95"), alpha=0.25, label="5–95% of draws")
    axes[0].plot(n, col(rows, "mean_var"), "o-", label="mean of var()")
    axes[0].plot(n, col(rows, "expected_mean"), "k--", label="(1 − 1/n²)·n")
    axes[0].plot([2], [1.6], "r*", ms=12, label="the seed's 1.6")
    axes[0].set(xscale="log", yscale="log", xlabel="n (A, B are n×n)", ylabel="var() of the entries of A@B")
    axes[0].legend(fontsize=8)
    axes[1].plot(n, col(rows, "relative_sd"), "o-", label="sd(var()) / n")
    axes[1].plot(n, [2.0 / x for x in n], "k--", label="∝ 1/n")
    axes[1].set(xscale="log", yscale="log", xlabel="n", ylabel="relative spread", title="the spread shrinks like 1/n")
    axes[1].legend(fontsize=8)
    return [fig_to_img(fig, "the 2x2 puzzle")]


def plot_softmax(rows):
    cases = list(dict.fromkeys((r["logits"], r["beta"]) for r in rows))
    fig, axes = plt.subplots(1, len(cases), figsize=(13, 2.6), squeeze=False)
    for ax, (lg, b) in zip(axes[0], cases):
        sel = [r for r in rows if r["logits"] == lg and r["beta"] == b]
        ax.bar(range(len(sel)), [r["value"] for r in sel], color=COLORS[0])
        ax.plot(range(len(sel)), [r["quoted"] for r in sel], "r_", ms=18, mew=2)
        ax.set(ylim=(0, 1.05), title=f"softmax({lg}{'' if b == 1 else f' × {b:g}'})", xticks=[])
        ax.title.set_fontsize(8)
    return [fig_to_img(fig, "softmax values")]


def plot_saturation(rows):
    dk = [r for r in rows if r["sweep"] == "d_k"]
    un = [r for r in dk if r["scale"] == "1"]
    sc = [r for r in dk if r["scale"] != "1"]
    nn = [r for r in rows if r["sweep"] == "N"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for rs, lab, c in ((un, "unscaled (β = 1)", COLORS[1]), (sc, "β = 1/√d_k", COLORS[0])):
        d = [r["d_k"] for r in rs]
        errorbar(axes[0], d, [r["max_weight"] for r in rs], [r["max_weight_lo"] for r in rs],
                 [r["max_weight_hi"] for r in rs], label=lab, color=c)
        errorbar(axes[1], d, [r["entropy"] for r in rs], [r["entropy_lo"] for r in rs], [r["entropy_hi"] for r in rs],
                 label=lab, color=c)
    axes[1].axhline(un[0]["ln_N"], color="k", ls=":", label="uniform (ln N)")
    axes[0].set(xscale="log", xlabel="d_k", ylabel=f"largest weight (N = {un[0]['N']})")
    axes[1].set(xscale="log", xlabel="d_k", ylabel="entropy (nats)")
    N = [r["N"] for r in nn]
    axes[2].plot(N, [r["max_score"] for r in nn], "o-", label="mean of the largest scaled score")
    axes[2].plot(N, [r["sqrt_2lnN"] for r in nn], "k--", label="√(2 ln N)")
    axes[2].set(xscale="log", xlabel="N (keys)", ylabel="score", title="longer sequences sharpen attention too")
    for ax in axes:
        ax.legend(fontsize=8)
    return [fig_to_img(fig, "saturation")]


def plot_gradients(rows):
    dk = [r for r in rows if r["sweep"] == "d_k"]
    un = [r for r in dk if r["beta"] == 1]
    sc = [r for r in dk if r["beta"] != 1 or r["d_k"] == 1]
    ls = [r for r in rows if r["sweep"] != "d_k"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for rs, lab, c in ((un, "β = 1", COLORS[1]), (sc, "β = 1/√d_k", COLORS[0])):
        d = [r["d_k"] for r in rs]
        axes[0].plot(d, [r["grad_logits"] for r in rs], "o-", color=c, label=f"‖∂L/∂s‖, {lab}")
        axes[0].plot(d, [r["grad_q"] for r in rs], "s--", color=c, label=f"‖∂L/∂q‖, {lab}")
    axes[0].set(xscale="log", yscale="log", xlabel="d_k", ylabel="mean gradient norm")
    axes[0].legend(fontsize=7)
    x = [r["logit_std"] for r in ls]
    errorbar(axes[1], x, [r["grad_logits"] for r in ls], [r["grad_logits_lo"] for r in ls],
             [r["grad_logits_hi"] for r in ls], label="‖∂L/∂s‖ (softmax Jacobian · upstream)", color=COLORS[2])
    axes[1].set(xscale="log", xlabel="logit scale β·√d_k", ylabel="mean norm", title="not monotone: rises, then vanishes")
    axes[1].legend(fontsize=8)
    return [fig_to_img(fig, "gradients")]


def plot_alternatives(rows):
    pols = list(dict.fromkeys(col(rows, "policy")))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, p in enumerate(pols):
        d = col(rows, "d_k", policy=p)
        axes[0].plot(d, col(rows, "score_std", policy=p), "o-", color=COLORS[i % len(COLORS)], label=p)
        axes[1].plot(d, col(rows, "entropy", policy=p), "o-", color=COLORS[i % len(COLORS)], label=p)
    axes[0].set(xscale="log", yscale="log", xlabel="d_k", ylabel="std of the scores at init")
    axes[1].axhline(math.log(64), color="k", ls=":", label="uniform")
    axes[1].set(xscale="log", xlabel="d_k", ylabel="attention entropy (nats)")
    for ax in axes:
        ax.legend(fontsize=7)
    return [fig_to_img(fig, "alternatives")]


def plot_projections(rows):
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(range(len(rows)), [r["var_scaled"] for r in rows],
            color=[COLORS[0] if r["verdict"] == "holds" else COLORS[1] for r in rows])
    ax.axvline(1, color="k", ls="--")
    ax.set_yticks(range(len(rows)), [r["case"] for r in rows], fontsize=7)
    ax.set(xscale="log", xlabel="Var(q·k) / d_k (1 = what 1/√d_k needs)")
    return [fig_to_img(fig, "projections")]


def plot_precision(rows):
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 3.8), sharey=True)
    for ax, dt in zip(axes, dtypes):
        for i, (scale, scores, label) in enumerate((("1/sqrt(d_k)", "fp32", "β = 1/√d_k, scores fp32"),
                                                    ("1", "fp32", "β = 1, scores fp32"),
                                                    ("1/sqrt(d_k)", "dtype", f"β = 1/√d_k, scores {dt}"),
                                                    ("1", "dtype", f"β = 1, scores {dt}"))):
            sel = [r for r in rows if r["dtype"] == dt and r["scale"] == scale and r["scores"] == scores]
            ax.plot([r["d_k"] for r in sel], [r["err_units"] for r in sel], "o-" if scale == "1" else "s--",
                    color=COLORS[i % len(COLORS)], label=label)
        ax.set(xscale="log", yscale="log", xlabel="d_k", title=f"{dt} attention against fp64")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("max |out error| / (u · max|v|)")
    return [fig_to_img(fig, "precision")]


def plot_sinks(rows):
    sinks = list(dict.fromkeys(r["sink"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
    for ax, key, label in ((axes[0], "key_mass", "mass the keys keep (1 − p_sink)"),
                           (axes[1], "max_weight", "largest key weight"),
                           (axes[2], "jacobian_trace", "keys' Jacobian trace Σ p(1 − p)")):
        for i, sink in enumerate(sinks):
            for scale, style in (("1/sqrt(d_k)", "--"), ("1", "-")):
                sel = [r for r in rows if r["sink"] == sink and r["scale"] == scale]
                errorbar(ax, [r["d_k"] for r in sel], [r[key] for r in sel], [r[key + "_lo"] for r in sel],
                         [r[key + "_hi"] for r in sel], ls=style, color=COLORS[i % len(COLORS)],
                         label=f"σ = {sink}, β = {'1/√d_k' if scale != '1' else '1'}")
        ax.set(xscale="log", xlabel="d_k", title=label)
    axes[0].legend(fontsize=7, ncol=2)
    return [fig_to_img(fig, "sinks")]


def plot_kvquant(rows):
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for ax, key, label in ((axes[0], "score_err", "rms score error β·q·δk"),
                           (axes[1], "weight_err", "weights' error (total variation)")):
        for i, fmt_name in enumerate(dict.fromkeys(r["format"] for r in rows)):
            for scale, style in (("1/sqrt(d_k)", "--"), ("1", "-")):
                sel = [r for r in rows if r["format"] == fmt_name and r["scale"] == scale]
                errorbar(ax, [r["d_k"] for r in sel], [r[key] for r in sel], [r[key + "_lo"] for r in sel],
                         [r[key + "_hi"] for r in sel], ls=style, color=COLORS[i % len(COLORS)],
                         label=f"{fmt_name}, β = {'1/√d_k' if scale != '1' else '1'}")
                if key == "score_err":
                    ax.plot([r["d_k"] for r in sel], [r["predicted"] for r in sel], "x", color="k", ms=4)
        ax.set(xscale="log", yscale="log", xlabel="d_k", title=label)
    axes[0].legend(fontsize=7)
    axes[0].text(0.02, 0.02, "× : β·√(E‖q‖²·E[δk²])", transform=axes[0].transAxes, fontsize=7)
    return [fig_to_img(fig, "kvquant")]


# Experiments without an entry here get their text and table, and no plot.
PLOTS = {
    "variance": plot_variance,
    "general": plot_general,
    "puzzle": plot_puzzle,
    "softmax": plot_softmax,
    "saturation": plot_saturation,
    "gradients": plot_gradients,
    "alternatives": plot_alternatives,
    "projections": plot_projections,
    "precision": plot_precision,
    "sinks": plot_sinks,
    "kvquant": plot_kvquant,
}

CSS = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } .sub { color: #666; margin-top: 0; }
section { border-top: 1px solid #ddd; padding-top: 0.6em; margin-top: 1.6em; }
.grid { display: grid; grid-template-columns: 9em 1fr; gap: 0.2em 1em; }
.grid div:nth-child(odd) { color: #666; }
.verdict { font-weight: 600; padding: 0.1em 0.5em; border-radius: 4px; }
.holds { background: #d8f0d8; } .fails { background: #f6d5d5; } .only { background: #fbeec8; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
td.v-holds { background: #e6f5e6; } td.v-fails { background: #f8e0e0; }
img { max-width: 100%; }
.summary td, .summary th { text-align: left; font-size: 13px; }
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--docs", default="../docs/lab.md", help="URL of docs/lab.md, where the derivations live")
    args = ap.parse_args()
    with open(args.data, encoding="utf-8") as f:
        doc = json.load(f)
    sections, summary = [], []
    samples_flag = f' --samples {doc["samples"]}' if doc.get("samples") else ""
    for t in doc["experiments"]:
        name, verdict = t["name"], t["verdict"]
        cls = {"holds": "holds", "fails": "fails"}.get(t["outcome"], "only")
        imgs = PLOTS[name](t["rows"]) if name in PLOTS else []
        summary.append(f'<tr><td><a href="#{html.escape(name)}">{html.escape(t["heading"])}</a></td>'
                       f'<td><span class="verdict {cls}">{html.escape(verdict)}</span></td></tr>')
        sections.append(
            f'<section id="{html.escape(name)}"><h2>{html.escape(t["heading"])}</h2>'
            f'<div class="grid"><div>seed documents</div><div>{html.escape(t["seeds"])}</div>'
            f'<div>claim</div><div>{html.escape(t["expected"])}</div>'
            f'<div>measured</div><div>{html.escape(t["measured"])}</div>'
            f'<div>tolerance</div><div>{html.escape(t["tolerance"])}</div>'
            f'<div>verdict</div><div><span class="verdict {cls}">{html.escape(verdict)}</span></div></div>'
            f'<p>{html.escape(t["discussion"])}</p>{"".join(imgs)}'
            f'<p><a href="{html.escape(args.docs)}#{html.escape(name)}">derivation</a> · table computed in '
            f'{t["seconds"]:.1f} s · <code>sdpa lab {html.escape(name)} --seed {doc["seed"]}{samples_flag}</code> '
            f'reproduces it</p>'
            f'{table_html(t["rows"])}</section>')
    draft = ""
    if doc.get("samples"):
        draft = (f' <b>A draft at --samples {doc["samples"]}</b>: every experiment ran at that size, not its '
                 f'own, so a verdict may not hold at the full size.')
    page = (f'<!doctype html><html><head><meta charset="utf-8"><title>sdpa lab: why √d_k</title>'
            f'<style>{CSS}</style></head><body><h1>Why attention divides by √d_k — measured</h1>'
            f'<p class="sub">sdpa {html.escape(doc["version"])}, kernel ISA {html.escape(doc["isa"])}, seed '
            f'{doc["seed"]}; experiments took {doc["experiments_seconds"]:.1f} s. Every score, softmax and gradient '
            f'below comes from the library\'s own attention kernel.{draft}</p>'
            f'<table class="summary"><tr><th>claim</th><th>verdict</th></tr>{"".join(summary)}</table>'
            f'{"".join(sections)}</body></html>\n')
    sys.stdout.write(page)


if __name__ == "__main__":
    main()
