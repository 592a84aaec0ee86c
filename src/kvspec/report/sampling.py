"""Document 004's figures: our measurements on the study's models, its stated numbers beside.

Only Figures 5-8 have numbers in the document's text (`specdec_qwen_figures_5_8.csv`): they
appear in columns marked "paper". pass@k carries 95% bootstrap intervals over problems and a
paired sign-flip test of each method against the classical baseline on the same problems.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvspec.io import read_json, write_text
from kvspec.report.figures import plt, save_figure
from kvspec.report.stats import bootstrap_ci, sign_flip_pvalue
from kvspec.report.tables import paper_subset, to_markdown
from kvspec.seeds import derive


def _table(df: pd.DataFrame, out: dict[str, str], title: str, notes: list[str]) -> None:
    df.to_csv(out["csv"], index=False)
    write_text(out["md"], "\n".join([f"# {title}", "", *[f"- {n}" for n in notes], "",
                                     to_markdown(df)]))  # fmt: skip


# ---- Figures 1-4: the sweep ----------------------------------------------------------------------
def _grid(item: dict[str, Any], inputs: dict[str, list[str]]) -> pd.DataFrame:
    r = read_json(inputs["result"][0])
    g = pd.DataFrame(r["grid"]).groupby(["temperature", "k"], as_index=False).sum(numeric_only=True)
    g["accepted_share"] = g["accepted"] / g["drafted"].clip(lower=1)
    g["passing_share"] = g["passing"] / g["drafted"].clip(lower=1)
    runs = pd.DataFrame(r["grid"]).groupby(["temperature", "k"]).size().to_numpy()
    g["seconds_per_run"] = g["seconds"] / runs
    g["seconds_per_token"] = g["seconds"] / g["tokens"].clip(lower=1)
    return g


def _heatmaps(g: pd.DataFrame, columns: dict[str, str], out: dict[str, str], title: str) -> None:
    fig, axes = plt.subplots(1, len(columns), figsize=(5.2 * len(columns), 3.8), squeeze=False)
    for ax, (col, label) in zip(axes[0], columns.items(), strict=True):
        table = g.pivot(index="temperature", columns="k", values=col)
        im = ax.imshow(table.to_numpy(), aspect="auto", origin="lower", cmap="viridis")
        ax.set_xticks(range(len(table.columns)), table.columns)
        ax.set_yticks(range(len(table.index)), table.index)
        ax.set(xlabel="max draft tokens k", ylabel="temperature", title=label)
        for (i, j), v in np.ndenumerate(table.to_numpy()):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=7)
        fig.colorbar(im, ax=ax)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out["png"], out["pdf"])


def _which_problems(settings: dict[str, Any]) -> str:
    """The HumanEval prompts a stage used (`sampling.task_ids` or the dataset's first ones)."""
    n, ids = settings["problems"], settings.get("task_ids") or []
    return f"HumanEval {', '.join(ids[:n])}" if ids else f"the first {n} HumanEval prompts"


def _sweep_notes(item: dict[str, Any], inputs: dict[str, list[str]]) -> list[str]:
    r = read_json(inputs["result"][0])
    return [
        f"Speculative sampling {r['method']} on {item['target']}, "
        f"{_which_problems(r['settings'])}, {r['settings']['max_new_tokens']} new tokens per run.",
        "accepted_share = prefix-accepted drafts / drafted (the usual rate); passing_share = "
        "expected share of drafts passing min(1, p/q) on their own, rejected prefix or not "
        "(the document's count). The document states no numbers for this figure.",
    ]


def sweep_acceptance(
    item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]
) -> None:
    g = _grid(item, inputs)
    _heatmaps(g, {"passing_share": "passing share (document's count)",
                  "accepted_share": "prefix-accepted share"}, out,
              "Figure 1: draft tokens accepted per max draft tokens and temperature")  # fmt: skip
    cols = ["temperature", "k", "drafted", "accepted", "passing", "passing_share", "accepted_share"]
    _table(g[cols], out, "Figure 1 (ours)", _sweep_notes(item, inputs))


def sweep_repeats(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    r = read_json(inputs["result"][0])
    d = pd.DataFrame(r["repeats"])
    d["passing_share"] = d["passing"] / d["drafted"].clip(lower=1)
    d["accepted_share"] = d["accepted"] / d["drafted"].clip(lower=1)
    s = d.groupby("k")[["passing_share", "accepted_share"]].agg(["mean", "std"])
    s.columns = [f"{a}_{b}" for a, b in s.columns]
    s = s.reset_index()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for col, label in (("passing_share", "passing (document)"), ("accepted_share", "prefix")):
        ax.errorbar(s["k"], s[f"{col}_mean"], yerr=s[f"{col}_std"], marker="o", capsize=3,
                    label=label)  # fmt: skip
    ax.set(xlabel="max draft tokens k", ylabel="share of draft tokens accepted",
           title=f"Figure 2: T = {d['temperature'].iloc[0]}, {d['repeat'].nunique()} runs "
                 "(mean ± std)")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, out["png"], out["pdf"])
    _table(s, out, "Figure 2 (ours)", _sweep_notes(item, inputs))


def _sweep_heatmap(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str],
                   column: str, label: str, title: str) -> None:  # fmt: skip
    g = _grid(item, inputs)
    number = item["figure"]
    _heatmaps(g, {column: label}, out, f"Figure {number}: {title}")
    _table(g[["temperature", "k", "tokens", column]], out, f"Figure {number} (ours)",
           _sweep_notes(item, inputs))  # fmt: skip


def sweep_time(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    _sweep_heatmap(item, inputs, out, "seconds_per_run", "seconds per run",
                   "time per max draft tokens and temperature")  # fmt: skip


def sweep_time_per_token(item: dict[str, Any], inputs: dict[str, list[str]],
                         out: dict[str, str]) -> None:  # fmt: skip
    _sweep_heatmap(item, inputs, out, "seconds_per_token", "seconds per generated token",
                   "time per generated token per max draft tokens and temperature")  # fmt: skip


# ---- Figures 5, 7, 10: timing --------------------------------------------------------------------
def timing_experiment(item: dict[str, Any], inputs: dict[str, list[str]],
                      out: dict[str, str]) -> None:  # fmt: skip
    r = read_json(inputs["result"][0])
    classical, spec, *variants = item["methods"]
    paper = paper_subset(inputs, "figure", str(item["figure"]))
    rows = [{"metric": m, "ours": v,
             "paper": " / ".join(f"{p.value} ({p.qualifier or 'as stated'}, {p.stated_in})"
                                 for p in paper[paper["metric"] == m].itertuples())}
            for m, v in _gains(r["summary"], classical, spec).items()]  # fmt: skip
    rows += [{"metric": f"{m}, {v} (our variant)", "ours": x, "paper": ""}
             for v in variants for m, x in _gains(r["summary"], classical, v).items()]  # fmt: skip
    rows += [{"metric": f"{m} s/token (mean ± std over runs)",
              "ours": f"{r['summary'][m]['s_per_token_mean']:.4f} ± "
                      f"{r['summary'][m]['s_per_token_std']:.4f}", "paper": ""}
             for m in item["methods"]]  # fmt: skip
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.4))
    names = item["methods"]
    a.bar(
        names,
        [r["summary"][m]["s_per_token_mean"] for m in names],
        yerr=[r["summary"][m]["s_per_token_std"] for m in names],
        capsize=4,
    )
    a.set(ylabel="seconds per token", title="latency")
    b.bar(names, [r["summary"][m]["tok_s"] for m in names])
    b.set(ylabel="tokens/s", title="throughput")
    fig.suptitle(
        f"Figure {item['figure']}: Experiment {item['experiment']} on {item['target']}", fontsize=9
    )
    save_figure(fig, out["png"], out["pdf"])
    notes = [
        f"Batch 1, interleaved runs in one process, {r['settings']['runs']} runs x "
        f"{_which_problems(r['settings'])} x {r['settings']['max_new_tokens']} "
        f"new tokens, T = {r['settings']['temperature']}, top-p = {r['settings']['top_p']}.",
        "paper = the document's stated ratios (Qwen2.5); ours on the study's models.",
        *(_variant_note(v, r.get("methods", {}).get(v, {})) for v in variants),
    ]
    _table(pd.DataFrame(rows), out, f"Figure {item['figure']} (ours beside the paper)", notes)


def _variant_note(name: str, spec: dict[str, Any]) -> str:
    cut = spec.get("stop_below", 0.0)
    how = (f"its draft ends after a token the draft drew with probability below {cut}"
           if cut else "k tokens every step")  # fmt: skip
    return (
        f"{name} (our variant, not the document's method): {spec.get('kind')} with draft "
        f"{spec.get('draft')}, up to {spec.get('k')} tokens a step; {how} (the draft's own "
        f"law decides, so the samples keep the target's distribution)."
    )


def _gains(summary: dict[str, Any], classical: str, spec: str) -> dict[str, float]:
    """Latency reduction and throughput gain of method `spec` over `classical`."""
    base, fast = summary[classical], summary[spec]
    return {"latency_reduction_x": base["s_per_token_mean"] / fast["s_per_token_mean"],
            "throughput_gain_x": fast["tok_s"] / base["tok_s"]}  # fmt: skip


# The document's Figure 10 in words (section 5; it prints no numbers for it), per method kind.
FIGURE_10_TEXT = {
    "classical": "the baseline",
    "sd": 'faster than classical sampling ("speculative sampling outperforms classic sampling")',
    "three_model": 'slower than speculative sampling ("the 3-model speculative sampling is '
    'performing worse")',
}


def time_per_token(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    r = read_json(inputs["result"][0])
    names = item["methods"]
    kinds = {m: _document_kind(r["methods"][m]) for m in names}
    df = pd.DataFrame([{"method": m, **r["summary"][m]} for m in names])
    df["x classical (ours)"] = _times_faster(r["summary"], kinds)
    df["paper (the text; no numbers)"] = [FIGURE_10_TEXT.get(kinds[m], "") for m in names]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar(names, df["s_per_token_mean"], yerr=df["s_per_token_std"], capsize=4)
    ax.set(
        ylabel="seconds per token (mean ± std over runs)",
        title=f"Figure 10: time per token on {item['target']}",
    )
    save_figure(fig, out["png"], out["pdf"])
    notes = [
        f"{r['settings']['runs']} interleaved runs; three_model k_d / k_i and sd k as in "
        "the config (the document: k_d = 5, k_i = 3 against speculative sampling with 5 "
        "tokens). The document states no numbers for this figure, only the order in the "
        "paper column.",
        *_figure_10_order(r["summary"], kinds),
    ]
    _table(df, out, "Figure 10 (ours)", notes)


def _document_kind(spec: dict[str, Any]) -> str:
    """A method's kind, or "ours" for our variants (a confidence cut-off), which the document's
    text does not describe."""
    return "ours" if spec.get("stop_below") else spec["kind"]


def _times_faster(summary: dict[str, Any], kinds: dict[str, str]) -> list[float]:
    """Each method's speed as a multiple of the classical method's (its s/token ÷ theirs)."""
    base = [m for m, k in kinds.items() if k == "classical"]
    if len(base) != 1:
        raise ValueError(f"Figure 10 needs one classical method, got {base} among {list(kinds)}")
    ref = summary[base[0]]["s_per_token_mean"]
    return [ref / summary[m]["s_per_token_mean"] for m in kinds]


def _figure_10_order(summary: dict[str, Any], kinds: dict[str, str]) -> list[str]:
    """Whether this run orders the methods as the document's text does: speculative faster
    than classical, three-model slower than speculative (one method of each kind, else no
    note)."""
    by_kind = {k: [m for m in kinds if kinds[m] == k] for k in ("classical", "sd", "three_model")}
    if any(len(v) != 1 for v in by_kind.values()):
        return []
    c, sd, three = (summary[v[0]]["s_per_token_mean"] for v in by_kind.values())
    holds = {"speculative faster than classical": sd < c,
             "three-model slower than speculative": three > sd}  # fmt: skip
    return [
        "The document's order, measured here: "
        + "; ".join(f"{claim}: {'yes' if ok else 'no'}" for claim, ok in holds.items())
        + f" (s/token: classical {c:.4f}, {by_kind['sd'][0]} {sd:.4f}, "
        f"{by_kind['three_model'][0]} {three:.4f})."
    ]


# ---- Figures 6, 8, 9: pass@k ---------------------------------------------------------------------
def passk_frame(item: dict[str, Any], inputs: dict[str, list[str]]) -> pd.DataFrame:
    """Per method and k: mean pass@k with its bootstrap CI; against the first method (the
    classical baseline) the paired difference, its CI and sign-flip p-value."""
    results = [read_json(f) for f in inputs["result"]]
    base = results[0]
    rows = []
    for res in results:
        tasks = list(base["per_task"])
        for k in (int(x.split("@")[1]) for x in base["pass@k"]):
            mine = [res["per_task"][t][f"pass@{k}"] for t in tasks]
            ref = [base["per_task"][t][f"pass@{k}"] for t in tasks]
            diff = np.subtract(mine, ref)
            seed = derive(item["seed"], res["method"], k)
            lo, hi = bootstrap_ci(mine, item["bootstrap"], derive(seed, "pass@k"))
            dlo, dhi = bootstrap_ci(diff, item["bootstrap"], derive(seed, "difference"))
            rows.append({"method": res["method"], "k": k, "pass@k": float(np.mean(mine)),
                         "ci_low": lo, "ci_high": hi, "minus_baseline": float(diff.mean()),
                         "diff_ci_low": dlo, "diff_ci_high": dhi,
                         "p_value": None if res is base else sign_flip_pvalue(
                             diff, item["bootstrap"], derive(seed, "sign flips")),
                         "problems": len(tasks),
                         "samples": res["per_task"][tasks[0]]["n"]})  # fmt: skip
    return pd.DataFrame(rows)


def _passk_plot(df: pd.DataFrame, out: dict[str, str], title: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, (name, g) in enumerate(df.groupby("method", sort=False)):
        x = g["k"].to_numpy() + (i - 1) * 0.12
        err = [g["pass@k"] - g["ci_low"], g["ci_high"] - g["pass@k"]]
        ax.errorbar(x, g["pass@k"], yerr=err, marker="o", capsize=3, label=name)
    ax.set(xlabel="k", ylabel="pass@k (95% bootstrap CI)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, out["png"], out["pdf"])


CHOSEN = (
    "The problems were chosen (sampling.task_ids; the config says how): absolute pass@k is not "
    "HumanEval's, only the comparison between methods is."
)


def _selection_notes(result: dict[str, Any]) -> list[str]:
    """How the problems were chosen: by the pilot (with its numbers), by id, or the first."""
    pilot, s = result.get("pilot"), result["settings"]
    if pilot:
        p = pilot["settings"]
        tried = f"HumanEval's first {pilot['tried']}" if p["problems"] else "all of HumanEval"
        return [
            f"Problems: the {pilot['selected']} of {pilot['tried']} tried ({tried}) that the "
            f"pilot passed at least {p['min_passes']} time(s) in {p['samples']} classical "
            f"samples (T = {p['temperature']}, top-p = {p['top_p']}, seeds split under "
            "'pilot', which no measurement uses; results/sampling/pilot.json). "
            "Absolute pass@k is therefore not HumanEval's, only the comparison between methods is."
        ]
    return [CHOSEN] if s.get("task_ids") else []


def _passk_notes(inputs: dict[str, list[str]]) -> list[str]:
    r = read_json(inputs["result"][0])
    s, tasks = r["settings"], list(r["per_task"])
    prompts = {
        "completion": "the raw stub continued, stopped at EOS or a blank line",
        "chat": "the stub in a user turn, the answer opened with a code fence and stopped at "
        "EOS or the closing fence",
    }
    prompt = prompts[s.get("prompt_format", "completion")]
    return [
        f"HumanEval {', '.join(tasks)}: {s['completions']} completions each ({prompt}; "
        f"T = {s['temperature']}, top-p = {s['top_p']}, at most {s['max_new_tokens']} tokens), "
        "the same seeds for every method; verdicts from the sandboxed runner.",
        *_selection_notes(r),
        "CIs: percentile bootstrap over problems; p_value: paired sign-flip test of the "
        "difference from the first (classical) row on the same problems.",
        "An exact speculative sampler emits the target's distribution, so no difference is "
        "expected; sd_*_printed resamples rejections from the target (the document's "
        "Algorithms 1-2 as printed), which is not exact.",
    ]


def passk_experiment(
    item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]
) -> None:
    df = passk_frame(item, inputs)
    paper = paper_subset(inputs, "figure", str(item["figure"]))
    pairs = zip(paper["metric"], paper["value"], strict=True)
    drops = {int(m[4:].split("_")[0]): v for m, v in pairs if m.startswith("pass")}
    df["drop_points (ours)"] = -100 * df["minus_baseline"] + 0.0  # + 0.0: no "-0" for ties
    df["drop_% (paper)"] = [drops.get(k) if m == item["methods"][1] else None
                            for m, k in zip(df["method"], df["k"], strict=True)]  # fmt: skip
    _passk_plot(df, out, f"Figure {item['figure']}: pass@k, Experiment {item['experiment']}")
    notes = _passk_notes(inputs) + [
        "drop_% (paper): the document's stated decrease of the "
        "speculative method (Qwen2.5), beside our drop in points."
    ]
    _table(df, out, f"Figure {item['figure']} (ours beside the paper)", notes)


def passk_methods(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    df = passk_frame(item, inputs)
    _passk_plot(df, out, "Figure 9: classical, speculative and three-model sampling")
    _table(
        df,
        out,
        "Figure 9 (ours)",
        _passk_notes(inputs)
        + ["The document states no numbers for this figure ('slightly worse')."],
    )


# ---- MATH-500 ------------------------------------------------------------------------------------
def math500(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    r = read_json(inputs["result"][0])
    df = pd.DataFrame([{"method": m, "accuracy": a, "problems": r["n"]}
                       for m, a in r["accuracy"].items()])  # fmt: skip
    notes = [
        f"Greedy answers of {item['target']} alone and with greedy speculative decoding "
        f"({r['method']}), graded with math-verify; identical responses: "
        f"{r['identical_responses']} of {r['n']} (greedy speculation must reproduce them).",
        "The document reports no MATH-500 numbers.",
    ]
    _table(df, out, "MATH-500 accuracy, plain vs speculative", notes)
