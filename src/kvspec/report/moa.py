"""Document 002's Tables 2, 5, 9 and 10: our drafters' speedup and acceptance length beside
the document's (Llama-3-8B-Instruct with 250M-parameter drafters, Qwen2.5-3B for Table 9;
ours: the configured targets with heads sized by their own layers); Table 8: the quality of
every method's outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.plan.names import HeadRun
from kvspec.report.stats import (
    SE,
    add_stderr,
    display_with_stderr,
    paired_ratio_difference,
    ratio_stderr,
)
from kvspec.report.tables import paper_numeric, save_with_paper, side_by_side

# our method suffix -> the document's decoding column (Table 10)
DECODING = {"tree": "EAGLE-2", "chain": "chain"}
SIZE_NOTE = (
    "trainable_size (ours): the head's trainable parameters and, in brackets, their ratio to "
    "one decoder layer of our target (the document's 250M heads are ~1.1 layers of "
    "Llama-3-8B), then the tokens it drafts over (its readout: the target's output rows of "
    "the tokens the target outputs most, or all of them); the document's total sizes are "
    "kept in its rows only."
)


def _sizes(runs: str, labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """label -> {trainable_size} from the heads' training stats the decoding job recorded."""
    out = {}
    for name, stats in read_json(runs)["heads"].items():
        vocab = stats.get("draft_vocab")  # heads trained before readouts: the full one
        out[labels.get(name, name)] = {
            "trainable_size": f"{stats['trainable_parameters'] / 1e6:.2f}M "
            f"({stats['trainable_per_decoder_layer']:.2f} layers"
            + (f"; drafts over {vocab:,} tokens)" if vocab else ")"),
        }
    return out


def _rows(summary: pd.DataFrame, labels: Mapping[str, str], mode: str) -> pd.DataFrame:
    """Our neural rows of one decoding mode ('chain' or 'tree'), with `drafter` labels: the
    heads every table reads (Table 5's retrainings are `seed_runs`')."""
    rows = summary[summary["method"].str.endswith(f"/{mode}")]
    rows = rows[[_run_of(m).repeat == 0 for m in rows["method"]]].copy()
    rows["drafter"] = [labels.get(m.split("/")[0], m.split("/")[0]) for m in rows["method"]]
    return rows


def _run_of(method: str) -> HeadRun:
    """The head run a neural method decodes with ("eagle.repeat1/chain" -> eagle, 1)."""
    return HeadRun.parse(method.split("/")[0])


def seed_runs(summary: pd.DataFrame, set_name: str, labels: Mapping[str, str],
              mode: str = "chain") -> pd.DataFrame:  # fmt: skip
    """Per drafter (its label), τ and speedup of each training run on `set_name` (repeat 0
    first), as lists: Table 5's spread between training seeds."""
    rows = summary[(summary["set"] == set_name) & summary["method"].str.endswith(f"/{mode}")]
    runs: dict[str, dict[int, tuple[float, float]]] = {}
    for _, r in rows.iterrows():
        run = _run_of(r["method"])
        label = labels.get(run.drafter, run.drafter)
        runs.setdefault(label, {})[run.repeat] = (float(r["accept_len"]), float(r["speedup"]))
    out = [
        {
            "drafter": d,
            "accept_len_runs": [by[k][0] for k in sorted(by)],
            "speedup_runs": [by[k][1] for k in sorted(by)],
        }
        for d, by in runs.items()
    ]
    return pd.DataFrame(out, columns=["drafter", "accept_len_runs", "speedup_runs"])


def seed_separation(runs: pd.DataFrame) -> str:
    """A note's sentence: each drafter's τ range over its training runs, and which pairs of
    drafters have τ ranges that do not overlap (separated beyond the seed spread)."""
    n = runs["accept_len_runs"].map(len)
    if runs.empty or n.min() < 2:
        return "One training run per head: the spread between training runs is not measured."
    span = {d: (min(t), max(t)) for d, t in zip(runs["drafter"], runs["accept_len_runs"],
                                                 strict=True)}  # fmt: skip
    names = list(span)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    apart = [f"{a} / {b}" for a, b in pairs
             if span[a][1] < span[b][0] or span[b][1] < span[a][0]]  # fmt: skip
    widths = [hi - lo for lo, hi in span.values()]
    return (
        f"Training seeds: every head trained {n.min()}-{n.max()} times (the run shown, then "
        f"retrainings under seeds split from the run's; columns `... per training run`); τ's "
        f"range over a head's runs is {min(widths):.3f}-{max(widths):.3f} "
        f"(mean {sum(widths) / len(widths):.3f}); {len(apart)} of {len(pairs)} pairs of heads "
        f"have τ ranges that do not overlap"
        + (": " + "; ".join(apart) if apart else "")
        + ". Every run decoded the same prompts, so these ranges hold the training draw only, "
        "not the prompt-sampling error above."
    )


def _first_match_only(table: pd.DataFrame, keys: list[str], ours: list[str]) -> pd.DataFrame:
    """A row the paper lists twice (e.g. Independent at two sizes) gets our numbers (columns
    `ours`) on its first occurrence only."""
    table.loc[table.duplicated(subset=keys), ours] = float("nan")
    return table


def table_2(summary: pd.DataFrame, item: Mapping[str, Any], runs: str,
            paper_csv: str) -> pd.DataFrame:  # fmt: skip
    """Speedup and τ per prompt set (tree drafting) and their means, per drafter."""
    labels, sets = item["labels"], list(item["sets"])
    rows = _rows(summary, labels, "tree" if item["tree"] else "chain")
    wide = rows.pivot_table(index="drafter", columns="set", values=["speedup", "accept_len"])
    ours = pd.DataFrame({"drafter": wide.index})
    for s in sets:
        ours[f"{s}_speedup"] = wide["speedup"][s].to_numpy() if s in wide["speedup"] else None
        ours[f"{s}_tau"] = wide["accept_len"][s].to_numpy() if s in wide["accept_len"] else None
    ours["mean_speedup"] = ours[[f"{s}_speedup" for s in sets]].mean(axis=1)
    ours["mean_tau"] = ours[[f"{s}_tau" for s in sets]].mean(axis=1)
    ours = _with_sizes(ours, runs, labels)
    metrics = ["trainable_size", *[f"{s}_{m}" for s in [*sets, "mean"] for m in ("speedup", "tau")]]
    table = side_by_side(ours, paper_numeric(paper_csv), ["drafter"], metrics)
    return _first_match_only(table, ["drafter"], [f"{m} (ours)" for m in metrics])


def _humaneval_labels(item: Mapping[str, Any]) -> dict[str, str]:
    """Drafter labels of Tables 5 and 10, where the document calls EAGLE-2's head EAGLE."""
    return {k: ("EAGLE" if v == "EAGLE-2" else v) for k, v in item["labels"].items()}


def table_humaneval(summary: pd.DataFrame, item: Mapping[str, Any], runs: str,
                    paper_csv: str, mode: str, with_decoding: bool) -> pd.DataFrame:  # fmt: skip
    """Tables 5 (chain) and 10 (tree): HumanEval tokens/s and τ per drafter (+ greedy), τ with
    its prompt-sampling standard error (`accept_len stderr (ours)`)."""
    labels = _humaneval_labels(item)
    human = summary[summary["set"] == "humaneval"]
    rows = _rows(human, labels, mode)
    per_prompt = prompt_counts(runs, "humaneval")
    ours = pd.DataFrame({"drafter": rows["drafter"], "tokens_per_s": rows["tok_s"],
                         "accept_len": rows["accept_len"], "speedup": rows["speedup"],
                         "exact_vs_greedy": rows["exact_vs_greedy"],
                         "accept_len_se": [tau_stderr(per_prompt.get(m, {}))
                                           for m in rows["method"]]})  # fmt: skip
    keys = ["drafter"]
    if with_decoding:
        ours["decoding"] = DECODING[mode]
        base = human[human["method"] == "greedy"]
        greedy = pd.DataFrame({"drafter": ["Baseline"], "decoding": ["Vanilla"],
                               "tokens_per_s": base["tok_s"].to_numpy(), "accept_len": [1.0],
                               "speedup": [1.0], "exact_vs_greedy": [1.0],
                               "accept_len_se": [0.0]})  # fmt: skip
        ours = pd.concat([ours, greedy])
        keys = ["drafter", "decoding"]
    ours = _with_sizes(ours, runs, labels)
    metrics = ["trainable_size", "tokens_per_s", "accept_len"]
    table = side_by_side(ours, paper_numeric(paper_csv), keys, metrics)
    table = add_stderr(table, ours[[*keys, "accept_len_se"]].rename(
        columns={"accept_len_se": "accept_len"}), keys)  # fmt: skip
    extra = ours[[*keys, "speedup", "exact_vs_greedy"]]
    ours_cols = [*(f"{m} (ours)" for m in metrics), f"accept_len{SE}", "speedup",
                 "exact_vs_greedy"]  # fmt: skip
    return _first_match_only(table.merge(extra, on=keys, how="left"), keys, ours_cols)


def prompt_counts(runs: str, set_name: str) -> dict[str, dict[str, tuple[int, int]]]:
    """method -> {prompt: (new tokens, target forwards)} of one set's timed records."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for r in read_json(runs)["records"]:
        if r.get("set") == set_name:
            out.setdefault(r["method"], {})[r["prompt"]] = (len(r["tokens"]), int(r["forwards"]))
    return out


def tau_stderr(per_prompt: Mapping[str, tuple[int, int]]) -> float:
    """The prompt-sampling standard error of τ = Σ tokens / Σ forwards (NaN below 2 prompts)."""
    if len(per_prompt) < 2:
        return float("nan")
    tokens, forwards = zip(*per_prompt.values(), strict=True)
    return ratio_stderr(tokens, forwards)


def separation(per_prompt: Mapping[str, Mapping[str, tuple[int, int]]],
               labels: Mapping[str, str], z: float = 2.0) -> str:  # fmt: skip
    """Which pairs of drafters (`labels`: method -> label) have τ differing by more than `z`
    paired standard errors over the prompts every one of them decoded (a note's sentence)."""
    common = sorted(set.intersection(*(set(per_prompt.get(m, {})) for m in labels)))
    if len(common) < 2:
        return f"τ differences between drafters need 2 common prompts or more; {len(common)} here."
    counts = {m: tuple(zip(*(per_prompt[m][p] for p in common), strict=True)) for m in labels}
    pairs = [(a, b) for i, a in enumerate(labels) for b in list(labels)[i + 1 :]]
    close = []
    for a, b in pairs:
        diff, se = paired_ratio_difference(counts[a], counts[b])
        if not abs(diff) > z * se:
            close.append(f"{labels[a]} / {labels[b]} ({diff:+.3f} ± {se:.3f})")
    return (
        f"τ paired over the {len(common)} prompts every drafter decoded (delta-method "
        f"standard error of each difference): {len(pairs) - len(close)} of {len(pairs)} "
        f"pairs differ by more than {z:g} SE"
        + ("; not separated: " + "; ".join(close) if close else "")
        + ". The spread between training runs is not in these errors."
    )


def _with_sizes(ours: pd.DataFrame, runs: str, labels: Mapping[str, str]) -> pd.DataFrame:
    sizes = _sizes(runs, labels)
    ours["trainable_size"] = [sizes.get(d, {}).get("trainable_size", "") for d in ours["drafter"]]
    return ours


def _notes(item: Mapping[str, Any], extra: list[str]) -> list[str]:
    sets = ", ".join(f"{k} = {v}" for k, v in item["sets"].items())
    return [
        "Ours: batch size 1, every method on the same prompts in one process (warm-up "
        "discarded); speedup over our greedy loop; tau = tokens per target forward.",
        f"Prompt sets: {sets}.",
        f"Chain drafting: at most {item['chain_k']} tokens; tree drafting: EAGLE-2's dynamic "
        f"tree {item['tree']}.",
        SIZE_NOTE,
        *extra,
    ]


def render_table_2(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_2(summary, item, inputs["runs"][0], inputs["paper"][0])
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "Rows without (ours) numbers are the document's drafters we do not train (TLI = 3, "
        "the official EAGLE-2 weights, a second Independent size)."]))  # fmt: skip


def render_table_5(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_humaneval(summary, item, inputs["runs"][0], inputs["paper"][0], "chain", False)
    per_prompt = prompt_counts(inputs["runs"][0], "humaneval")
    chains = {m: item["labels"].get(m.split("/")[0], m.split("/")[0])
              for m in summary.loc[summary["set"] == "humaneval", "method"]
              if m.endswith("/chain") and _run_of(m).repeat == 0}  # fmt: skip
    labels = _humaneval_labels(item)
    runs = seed_runs(summary, "humaneval", labels)
    if item["repeats"] > 1:
        columns = _run_columns(runs)
        table = _first_match_only(table.merge(columns, on="drafter", how="left"), ["drafter"],
                                  list(columns.columns[1:]))  # fmt: skip
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "HumanEval prompts of the HumanEval set, chain drafting; the ablation heads are "
        "trained like the others and decoded on that set only. '-LSA' (ours): every layer's "
        "K/V averaged over layers and mapped linearly, no attention over layers; "
        "'-LSA, o_1...o_t inputs': the target's last-layer features as the cross-attention's "
        "keys and values (our reading of the document's two -LSA variants). EAGLE (more "
        "params): a wider MLP; (more layers): two narrower layers, about EAGLE's trainable "
        "size.", STDERR_NOTE, separation(per_prompt, chains), seed_separation(runs)]),
        shown=display_with_stderr(table))  # fmt: skip


def _run_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """τ and speedup of each training run as text columns ("1.333, 1.291")."""

    def text(values: list[float]) -> str:
        return ", ".join(f"{v:.3f}" for v in values)

    return pd.DataFrame(
        {
            "drafter": runs["drafter"],
            "accept_len per training run (ours)": runs["accept_len_runs"].map(text),
            "speedup per training run (ours)": runs["speedup_runs"].map(text),
        }
    )


STDERR_NOTE = (
    "accept_len (ours): τ ± its prompt-sampling standard error (delta method over "
    "the set's prompts; CSV: `accept_len stderr (ours)`)."
)


def render_table_9(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_2(summary, item, inputs["runs"][0], inputs["paper"][0])
    alt = item["models"][-1]
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        f"Ours: the drafters trained against and decoded with model {alt!r} (the document: "
        "Qwen2.5-3B-Instruct with 80M-parameter drafters)."]))  # fmt: skip


# our quality metric -> (the document's column, scale of ours to its unit)
QUALITY_COLUMNS = {"humaneval": ("humaneval_pass1", 100.0), "gsm8k": ("gsm8k_acc", 100.0),
                   "cnndm": ("cnndm_rougeL_f", 1.0)}  # fmt: skip


def table_8(quality: pd.DataFrame, item: Mapping[str, Any], paper_csv: str) -> pd.DataFrame:
    """Quality per method: greedy as the document's vanilla row, each head's tree method as
    its drafter row, the other methods under their own names."""
    labels = item["labels"]
    rows = []
    for method, part in quality.groupby("method", sort=False):
        head, _, mode = method.partition("/")
        if mode == "chain" or "/" in mode:
            continue  # the document's Table 8 decodes with EAGLE-2 trees; ".../vocab<N>": the sweep
        row = {
            "decoding": "Vanilla decoding" if method == "greedy" else "Speculative Decoding",
            "model": "Llama3-8B-Instruct" if method == "greedy" else labels.get(head, method),
        }
        for _, r in part.iterrows():
            column, scale = QUALITY_COLUMNS[r["metric"]]
            row |= {column: r["score"] * scale, f"{r['metric']}_n": int(r["n"]),
                    f"{r['metric']}_cut": int(r["cut"]),
                    f"{r['metric']}_same_as_greedy": r["same_as_greedy"]}  # fmt: skip
        rows.append(row)
    ours = pd.DataFrame(rows)
    metrics = [c for c, _ in QUALITY_COLUMNS.values()]
    for column in metrics:
        ours[column] = ours[column] if column in ours else float("nan")
    table = side_by_side(ours, paper_numeric(paper_csv), ["decoding", "model"], metrics)
    extra = [c for c in ours.columns if c not in metrics and c not in ("decoding", "model")]
    return table.merge(ours[["decoding", "model", *extra]], on=["decoding", "model"], how="left")


def render_table_8(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    quality = pd.read_csv(inputs["summary"][0])
    table = table_8(quality, item, inputs["paper"][0])
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], [
        "Ours: the answers of the decoding job (Table 2's prompts of the scored sets, greedy "
        f"verification, at most {item['max_new_tokens']} new tokens each; <metric>_cut counts "
        "answers stopped by that limit); the row Llama3-8B-Instruct is our target's greedy "
        "decoding, the drafter rows its tree methods, other rows our n-gram baselines.",
        "HumanEval pass@1: the answer's first code block after the problem's stub, run in the "
        "sandbox against the problem's tests; GSM8K: the answer's last number equals the "
        "reference's '#### ' answer; CNN/DM: ROUGE-L F (LCS of lower-cased words) against "
        "Spec-Bench's reference highlights. <metric>_same_as_greedy: share of answers "
        "token-identical to greedy decoding's.",
    ])  # fmt: skip


def render_table_10(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                    out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_humaneval(summary, item, inputs["runs"][0], inputs["paper"][0], "tree", True)
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "The HumanEval set's prompts (not the full 164 problems), tree drafting; Baseline = "
        "our greedy loop. Not reproduced: Ouroboros.", STDERR_NOTE]),
        shown=display_with_stderr(table))  # fmt: skip


def vocab_sweep(summary: pd.DataFrame, item: Mapping[str, Any], runs: str) -> pd.DataFrame:
    """One head on the ablation set over each drafting vocabulary (its trained one included),
    beside greedy decoding: accepted length, tokens/s, speedup, exactness."""
    sweep, mode = item["vocab_sweep"], "tree" if item["tree"] else "chain"
    name = sweep["drafter"]
    saved = read_json(runs)["heads"][name]["draft_vocab"]  # the configured N
    order = {"greedy": -1.0, f"{name}/{mode}": float(saved)}
    order |= {f"{name}/{mode}/vocab{n or 'full'}": float(n or "inf") for n in sweep["sizes"]}
    rows = summary[(summary["set"] == item["ablation_set"]) & summary["method"].isin(order)]
    rows = rows.assign(key=rows["method"].map(order)).sort_values("key", kind="stable")
    label = item["labels"].get(name, name)
    return pd.DataFrame({
        "drafter": ["greedy" if m == "greedy" else label for m in rows["method"]],
        "method": rows["method"],
        "drafting_vocab": ["" if k < 0 else "full" if k == float("inf") else str(int(k))
                           for k in rows["key"]],
        "accept_len": rows["accept_len"], "tok_s": rows["tok_s"],
        "speedup": rows["speedup"], "exact_vs_greedy": rows["exact_vs_greedy"],
    })  # fmt: skip


def render_vocab_sweep(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                       out: Mapping[str, str]) -> None:  # fmt: skip
    from kvspec.report.tables import write_table

    table = vocab_sweep(pd.read_csv(inputs["summary"][0]), item, inputs["runs"][0])
    write_table(table, out["csv"], out["md"], "Drafting vocabulary sweep (document 002's heads)", [
        f"Not in the document: {item['labels'].get(item['vocab_sweep']['drafter'])} decoding "
        f"{item['ablation_set']!r} ({'tree' if item['tree'] else 'chain'} drafting), its "
        "readout restricted to the N tokens the target output most in the head's training "
        "responses (drafting_vocab; empty: greedy decoding without a drafter). The head "
        "trained once against the full vocabulary; verification is over every token, so "
        "every row stays exact. The row without /vocab is the head's configured vocabulary, the "
        "one Tables 2, 5, 9 and 10 use."])  # fmt: skip


def figure_4(record: Mapping[str, Any], labels: Mapping[str, str]) -> pd.DataFrame:
    """One row per (method, batch size): throughput, against greedy at the same batch size,
    accepted drafts, tokens per verification of a row, and where the time went."""
    rows = pd.DataFrame(record["rows"])
    greedy = rows[rows["method"] == "greedy"].set_index("slots")["tok_s"]
    table = pd.DataFrame({
        "method": [labels.get(m, m) for m in rows["method"]],
        "batch size": rows["slots"],
        "tok/s": rows["tok_s"],
        "vs greedy": rows["tok_s"] / rows["slots"].map(greedy),
        "accepted / drafted": rows["accepted"] / rows["drafted"].where(rows["drafted"] > 0),
        "tokens per row step": (rows["tokens"] - rows["requests"]) / rows["row_steps"],
        "draft share": rows["draft_seconds"] / rows["seconds"],
        "same as alone": rows["same_as_alone"].astype(str) + " of " + rows["requests"].astype(str),
    })  # fmt: skip
    return table


def render_figure_4(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                    outputs: Mapping[str, str]) -> None:  # fmt: skip
    """Figure 4 measured on CPU: throughput against batch size, one line per method."""
    import matplotlib.pyplot as plt

    from kvspec.report.figures import save_figure
    from kvspec.report.tables import write_table

    record = read_json(inputs["runs"][0])
    labels = {"greedy": "greedy (no drafting)", **item["labels"]}
    table = figure_4(record, labels)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for method, part in table.groupby("method", sort=False):
        ax.plot(part["batch size"], part["tok/s"], marker="o", label=method)
    ax.set_xscale("log", base=2)
    sizes = sorted(set(table["batch size"]))
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("batch size (most requests decoding at once)")
    ax.set_ylabel("throughput (tok/s)")
    ax.set_title("Continuous batching with chain drafting (measured, this CPU)")
    ax.legend(fontsize=7)
    save_figure(fig, outputs["png"], outputs["pdf"])
    title = "Figure 4: inference with continuous batching"
    write_table(table, outputs["csv"], outputs["md"], title, _figure_4_notes(record, item))


def _figure_4_notes(record: Mapping[str, Any], item: Mapping[str, Any]) -> list[str]:
    s = record["settings"]
    return [
        f"Measured here ({record['cpu']}, {record['threads']} threads, {s['dtype']}): the first "
        f"{s['bench']['n']} prompts of the {item['set']} set, all arriving at once, "
        f"{s['new_tokens']} tokens each (no end-of-sequence stop), served by continuous batching "
        "(kvspec.lecture.scheduler) with at most `batch size` requests decoding together; "
        f"heads draft chains of {s['chain_k']} tokens, every request's drafts verified in one "
        "batched target forward (kvspec.decoding.batch_spec). The document ran vLLM on GPUs "
        "without tree drafting; its figure's numbers are not transcribed.",
        "Drafting runs request by request (each request has its own drafter and head cache); "
        "only verification is batched. draft share: drafting time / wall time. tokens per row "
        "step: tokens each request gains per verification (1 for greedy). same as alone: "
        "requests whose tokens equal their greedy decoding alone at batch 1 (batched float32 "
        "forwards may flip a near-tied choice).",
    ]
