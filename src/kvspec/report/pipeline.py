"""Document 003 (PipeInfer): the real multi-process runs of every pipeline strategy."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table

COLUMNS = {"tokens_per_s": "tok/s", "ttft_s": "TTFT s", "itl_s": "ITL s",
           "accept_len": "tokens per target run", "drafted": "drafted", "accepted": "accepted",
           "cancelled": "cancelled", "max_rank_rss_mb": "max rank peak RSS MB"}  # fmt: skip


def run_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per strategy and stage count: medians over prompts and repeats, speed relative to the
    one-process engine on the same prompts, and whether every run equalled greedy decoding."""
    df = pd.DataFrame(rows)
    df["variant"] = df["variant"].fillna("") if "variant" in df else ""
    df["max_rank_rss_mb"] = df["peak_rss_mb"].map(lambda x: max(v for v in x if v is not None))
    base = df[(df.strategy == "iterative") & (df.n_stages == 1)]
    base_speed = base.groupby(["set", "prompt"])["tokens_per_s"].median()
    df["speedup"] = [s / base_speed[(a, p)] for s, a, p in
                     zip(df.tokens_per_s, df.set, df.prompt, strict=True)]  # fmt: skip
    grouped = df.groupby(["strategy", "variant", "n_stages", "ranks"], sort=False)
    out = grouped[[*COLUMNS, "speedup"]].median().reset_index()
    out["runs"] = grouped.size().values
    out["all exact"] = grouped["exact"].all().values
    return out.rename(columns=COLUMNS | {"speedup": "speed / one process"})


def render_runs(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    result = read_json(inputs["result"][0])
    table = run_table(result["runs"])
    s = result["settings"]
    prompts = sorted({(r["set"], r["prompt"], r["prompt_tokens"]) for r in result["runs"]})
    notes = [
        f"Target {item['target']} split over n_stages ranks (torch.distributed, gloo; torchrun "
        f"on this machine, {s['threads_per_rank']} thread per rank); speculative and pipeinfer "
        f"add the draft {item['draft']} on a rank of its own. The one-process row (iterative, "
        f"n_stages 1) is the same engine in one process with the rule's threads: the speed "
        f"baseline.",
        f"{s['max_new_tokens']} greedy tokens per prompt, {s['runs']} run(s) per strategy; "
        f"prompts (set, id, tokens): " + "; ".join(f"{a} {b} ({n})" for a, b, n in prompts) + ".",
        "Medians over prompts and runs. tok/s excludes the first token (the document's "
        "generation speed); TTFT includes the prefill. 'all exact': every run's tokens equal "
        "single-process greedy decoding with transformers' own forward.",
        f"Speculative: k = {s['k']} draft tokens per pipeline run. PipeInfer: {s['pipeinfer']}.",
        "The document's Figures 4-10 plot speed, TTFT, ITL and memory against 1-32 nodes of "
        "70B-180B models: this table has our measured points only (no paper column).",
    ]
    write_table(
        table, out["csv"], out["md"], "PipeInfer strategies: real multi-process runs", notes
    )


def render_validation(item: dict[str, Any], inputs: dict[str, list[str]],
                      out: dict[str, str]) -> None:  # fmt: skip
    sim = read_json(inputs["result"][0])
    table = pd.DataFrame(sim["validation"])
    cal = sim["calibration"]
    notes = [
        "Each real configuration (medians over prompts and runs) beside the simulator "
        "(kvspec.pipeline.simulate) with the measured loopback link and our draft's per-token "
        "acceptance alpha, estimated from the speculative strategy's accepted drafts per run "
        "(geometric model). speed_error = simulated / measured - 1.",
        f"Calibration (seconds, one thread): decoder layer {cal['layer'][0]:.2e} + "
        f"{cal['layer'][1]:.2e} q; output head {cal['head'][0]:.2e} + {cal['head'][1]:.2e} q; "
        f"draft of k tokens {cal['draft'][0]:.2e} + {cal['draft'][1]:.2e} k.",
        "The simulator gives every node a CPU of its own; the real runs put the target ranks "
        "and the draft's on this machine's 2 cores, so concurrent work (the draft rank beside "
        "the stages under PipeInfer) is slower here than simulated.",
    ]
    write_table(table, out["csv"], out["md"], "PipeInfer simulator against the real runs", notes)


def render_variance(item: dict[str, Any], inputs: dict[str, list[str]],
                    out: dict[str, str]) -> None:  # fmt: skip
    """Figure 10's question on our runs: speed per prompt, per strategy."""
    from kvspec.report.figures import save_figure

    rows = pd.DataFrame(read_json(inputs["result"][0])["runs"])
    rows = rows[(rows.n_stages > 1) & ~_is_ablation(rows)]
    df = rows.groupby(["strategy", "n_stages", "set", "prompt"], sort=False)["tokens_per_s"]
    df = df.median().reset_index()
    fig, ax = _axes()
    for (strategy, n), g in df.groupby(["strategy", "n_stages"], sort=False):
        ax.plot(range(len(g)), g.tokens_per_s, marker="o", label=f"{strategy} ({n} ranks)")
    ax.set_xticks(range(len(g)), [f"{a}\n{p}" for a, p in zip(g.set, g.prompt, strict=True)])
    ax.set_ylabel("generation speed (tok/s)")
    ax.set_title("Prompt-to-prompt variance (measured, this CPU)")
    ax.legend()
    save_figure(fig, out["png"], out["pdf"])
    notes = ["Measured on this machine's CPU (the document's Figure 10: a 4-GPU cluster, Senku "
             "70B with TinyLlama); medians over runs per prompt."]  # fmt: skip
    write_table(df, out["csv"], out["md"], "Figure 10: prompt-to-prompt variance", notes)


def pair_table(runs: list[list[dict[str, Any]]], pairs: list[dict[str, str]],
               n_stages: int) -> pd.DataFrame:  # fmt: skip
    """Per model pair and strategy at `n_stages` target ranks: medians over prompts and runs,
    speed relative to iterative inference at the same ranks and to the one-process engine on
    the same prompts, the draft's accepted share of drafted tokens, exactness of every run."""
    parts = []
    for rows, pair in zip(runs, pairs, strict=True):
        df = pd.DataFrame(rows)
        df = df[~_is_ablation(df)]
        one = df[(df.strategy == "iterative") & (df.n_stages == 1)]
        df = df[df.n_stages == n_stages]
        if df.empty:
            raise ValueError(f"pair {pair}: no runs at {n_stages} target ranks")
        iterative = df[df.strategy == "iterative"]
        key = ["set", "prompt"]
        df = df.join(iterative.groupby(key)["tokens_per_s"].median().rename("iterative"), on=key)
        df = df.join(one.groupby(key)["tokens_per_s"].median().rename("one"), on=key)
        df["vs_iterative"] = df.tokens_per_s / df.iterative
        df["vs_one"] = df.tokens_per_s / df.one
        grouped = df.groupby("strategy", sort=False)
        out = grouped[["tokens_per_s", "vs_iterative", "vs_one", "accept_len"]].median()
        sums = grouped[["drafted", "accepted"]].sum()
        out["accepted / drafted"] = (sums.accepted / sums.drafted).where(sums.drafted > 0)
        out["runs"], out["all exact"] = grouped.size(), grouped["exact"].all()
        parts.append(out.reset_index().assign(pair=f"{pair['target']} + {pair['draft']}"))
    table = pd.concat(parts, ignore_index=True)
    table = table[["pair", *[c for c in table.columns if c != "pair"]]]
    return table.rename(columns={"tokens_per_s": "tok/s", "vs_iterative": "speed / iterative",
                                 "vs_one": "speed / one process",
                                 "accept_len": "tokens per target run"})  # fmt: skip


def render_pairs(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    """Figure 9 on our model pairs: generation speed per strategy, grouped by pair."""
    from kvspec.report.figures import save_figure

    n = item["n_stages"]
    runs = [read_json(path)["runs"] for path in inputs["result"]]
    table = pair_table(runs, item["pairs"], n)
    pairs, strategies = list(dict.fromkeys(table.pair)), list(dict.fromkeys(table.strategy))
    fig, ax = _axes(size=(1.0 + 2.2 * len(pairs), 4.0))
    width = 0.8 / len(strategies)
    for s, strategy in enumerate(strategies):
        part = table[table.strategy == strategy].set_index("pair").reindex(pairs)
        ax.bar([i + s * width for i in range(len(pairs))], part["tok/s"], width, label=strategy)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(pairs))], pairs, fontsize=8)
    ax.set_ylabel("generation speed (tok/s)")
    ax.set_title(f"Generation speed across model pairs, {n} target ranks (measured, this CPU)")
    ax.legend(fontsize=7)
    save_figure(fig, out["png"], out["pdf"])
    write_table(table, out["csv"], out["md"], "Figure 9: generation speed across model pairs",
                _pair_notes(table, n))  # fmt: skip


def _pair_notes(table: pd.DataFrame, n: int) -> list[str]:
    notes = [
        f"Measured on this machine's CPU: every strategy with the target split over {n} ranks "
        "(the draft on one more), the same prompts and settings as pipeinfer_runs; medians over "
        "prompts and runs. The document's Figure 9: 4 GPU nodes, six 33B-141B targets with "
        "1.1B-9B drafts (Table III); no numbers are transcribed from it.",
        "speed / iterative: per prompt, against iterative inference at the same ranks; "
        "accepted / drafted: the draft's tokens accepted by the target, summed over runs.",
    ]
    speed = table.pivot(index="pair", columns="strategy", values="tok/s")
    if {"pipeinfer", "speculative"} <= set(speed.columns):
        wins = int((speed["pipeinfer"] > speed["speculative"]).sum())
        notes.append(f"PipeInfer faster than speculative inference for {wins} of {len(speed)} "
                     "pairs (the document: all but one of its pairs).")  # fmt: skip
    return notes


def _is_ablation(rows: pd.DataFrame) -> pd.Series:
    """Rows of PipeInfer's ablation runs (Figure 8), not of the strategies themselves."""
    if "variant" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["variant"].fillna("").astype(bool)


def _axes(n: int = 1, m: int = 1, size: tuple[float, float] = (6.0, 4.0)):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(m, n, figsize=(size[0] * n, size[1] * m), squeeze=False)
    return (fig, axes) if n * m > 1 else (fig, axes[0][0])


SIMULATED = ("simulated by kvspec.pipeline.simulate, calibrated on our models' measured costs "
             "(pipeinfer_simulation_validation); not the document's 70B-180B models")  # fmt: skip


def render_simulated_curves(item: dict[str, Any], inputs: dict[str, list[str]],
                            out: dict[str, str]) -> None:  # fmt: skip
    """One panel per link and acceptance: the metric against node count per strategy; on the
    panel of the measured link and acceptance, the real multi-rank runs' medians too."""
    from kvspec.report.figures import save_figure

    sim = read_json(inputs["result"][0])
    df, metric = pd.DataFrame(sim["curves"]), item["metric"]
    links, accs = list(dict.fromkeys(df.link)), list(dict.fromkeys(df.acceptance))
    measured = measured_points(sim["validation"], metric)
    fig, axes = _axes(len(accs), len(links), (4.0, 3.0))
    for i, link in enumerate(links):
        for j, acc in enumerate(accs):
            ax = axes[i][j]
            part = df[(df.link == link) & (df.acceptance == acc)]
            for strategy, g in part.groupby("strategy", sort=False):
                line = ax.plot(g.nodes, g[metric], marker="o", label=strategy)[0]
                if (i, j) == (0, 0):  # the measured link and acceptance come first
                    m = measured[measured.strategy == strategy]
                    ax.scatter(m.nodes, m.measured, marker="X", s=60, color=line.get_color(),
                               edgecolors="k", zorder=3, label=f"{strategy}, measured")  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_title(f"{link}\n{acc} (alpha {part.alpha.iloc[0]:.2f})", fontsize=8)
            ax.set_xlabel("nodes")
            ax.set_ylabel(item["axis"], fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"SIMULATED: {item['axis']} against node count (X: measured on this CPU)")
    fig.tight_layout()
    save_figure(fig, out["png"], out["pdf"])
    cols = ["link", "acceptance", "alpha", "strategy", "nodes", metric]
    table = pd.concat([df[cols].assign(source="simulated"),
                       measured.rename(columns={"measured": metric}).assign(
                           link=links[0], acceptance=accs[0], source="measured")],
                      ignore_index=True)  # fmt: skip
    write_table(table, out["csv"], out["md"], f"Simulated {item['axis']}", [
        SIMULATED,
        "source 'measured': the real runs' medians at 2-3 ranks on this machine (loopback "
        "link, our draft's acceptance: the first panel), drawn as X over the curves; "
        "simulated_at_measured and error: the simulator at exactly those runs' settings "
        "(pipeinfer_simulation_validation) and simulated / measured - 1.",
    ])  # fmt: skip


def measured_points(validation: list[dict[str, Any]], metric: str) -> pd.DataFrame:
    """strategy, nodes, measured, simulated_at_measured, error of each multi-rank real
    configuration (the one-process engine runs with the rule's threads, not a rank's: left
    out)."""
    v = pd.DataFrame(validation)
    v = v[v.n_stages > 1]
    return pd.DataFrame({
        "strategy": v.strategy, "nodes": v.n_stages, "measured": v[f"measured_{metric}"],
        "simulated_at_measured": v[f"simulated_{metric}"],
        "error": v[f"simulated_{metric}"] / v[f"measured_{metric}"] - 1,
    })  # fmt: skip


def render_simulated_memory(item: dict[str, Any], inputs: dict[str, list[str]],
                            out: dict[str, str]) -> None:  # fmt: skip
    """Figure 7: (a) weights per node against node count, with the real runs' peak RSS per
    rank; with `item['link']`, (b) TTFT and (c) speed over that link (the document's
    constrained clusters: Gigabit Ethernet)."""
    from kvspec.report.figures import save_figure

    sim, link = read_json(inputs["result"][0]), item.get("link")
    df = pd.DataFrame(sim["memory"])
    fig, axes = _axes(3 if link else 1, 1, (5.0, 4.0))
    _draw_memory(axes[0][0] if link else axes, df, sim["measured_memory"])
    notes = ["(a) Weights per node from the model's parameter bytes and the layer split (the "
             "head node also holds the embedding and output head); measured points are whole "
             "processes (Python, torch, activations, KV cache)."]  # fmt: skip
    table = df.assign(panel="a")
    if link:
        slow = _link_curves(sim["curves"], link)
        panels = ((axes[0][1], "ttft_s", "(b) SIMULATED time to first token (s)"),
                  (axes[0][2], "tokens_per_s", "(c) SIMULATED speed (tok/s)"))  # fmt: skip
        for panel, metric, title in panels:
            _draw_strategies(panel, slow, metric)
            panel.set_title(f"{title}, {link}", fontsize=9)
        axes[0][1].legend(fontsize=6)
        notes.append(f"(b), (c): {SIMULATED}; link {link}, one line per strategy and "
                     "acceptance. The document's constrained clusters also have slower CPUs; "
                     "ours are calibrated on this machine's.")  # fmt: skip
        cols = ["acceptance", "alpha", "strategy", "nodes", "ttft_s", "tokens_per_s"]
        table = pd.concat([table, slow[cols].assign(panel="b, c")], ignore_index=True)
    save_figure(fig, out["png"], out["pdf"])
    write_table(table, out["csv"], out["md"], "Figure 7: memory per node; constrained link", notes)


def _draw_memory(ax: Any, df: pd.DataFrame, measured_memory: list[dict[str, Any]]) -> None:
    """Panel (a): weights per node, the real runs' peak RSS per rank as crosses."""
    for col, label in (("head_node_mb", "head node (weights)"),
                       ("other_node_mb", "other target node (weights)"),
                       ("draft_node_mb", "speculative node (weights)")):  # fmt: skip
        ax.plot(df.nodes, df[col], marker="o", label=label)
    measured = [(r["n_stages"], v) for r in measured_memory for v in r["peak_rss_mb"]
                if v is not None and r["n_stages"] > 1]  # fmt: skip
    if measured:
        ax.scatter(*zip(*measured, strict=True), color="k", marker="x",
                   label="measured peak RSS per rank (process)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("MB")
    ax.set_title("(a) memory per node: weights computed, RSS measured", fontsize=9)
    ax.legend(fontsize=7)


def _link_curves(curves: list[dict[str, Any]], link: str) -> pd.DataFrame:
    """The simulated curves over `link`, for the document's acceptances (not ours)."""
    df = pd.DataFrame(curves)
    part = df[(df.link == link) & (df.acceptance != "ours (measured)")]
    if part.empty:
        raise ValueError(f"the simulation has no curves over link {link!r}: add it to "
                         "pipeline.simulate.links")  # fmt: skip
    return part


def _draw_strategies(ax: Any, df: pd.DataFrame, metric: str) -> None:
    """One line per (strategy, acceptance): colour by strategy, line style by acceptance."""
    styles = dict(zip(dict.fromkeys(df.acceptance), ("-", "--", ":", "-."), strict=False))
    colours = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(df.strategy))}
    for (strategy, acc), g in df.groupby(["strategy", "acceptance"], sort=False):
        ax.plot(g.nodes, g[metric], marker="o", ms=3, color=colours[strategy],
                linestyle=styles.get(acc, "-"), label=f"{strategy}, {acc}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes")


def render_simulated_ablation(item: dict[str, Any], inputs: dict[str, list[str]],
                              out: dict[str, str]) -> None:  # fmt: skip
    """Figure 8: the simulated ablations at the document's acceptances; beside them, when the
    ablations ran for real, measured and simulated speed per variant at each stage count."""
    from kvspec.report.figures import save_figure

    sim = read_json(inputs["result"][0])
    df = pd.DataFrame(sim["ablation"])
    measured = pd.DataFrame(sim.get("measured_ablation") or [])
    fig, axes = _axes(2 if len(measured) else 1, 1, (8.0, 4.0))
    ax = axes[0][0] if len(measured) else axes
    accs, variants = list(dict.fromkeys(df.acceptance)), list(dict.fromkeys(df.variant))
    width = 0.8 / len(variants)
    for v, variant in enumerate(variants):
        part = df[df.variant == variant].set_index("acceptance").reindex(accs)
        ax.bar([i + v * width for i in range(len(accs))], part.tokens_per_s, width, label=variant)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(accs))], accs)
    ax.set_ylabel("generation speed (tok/s)")
    ablation = sim["settings"]["simulate"]["ablation"]
    ax.set_title(f"SIMULATED ablation, {ablation['nodes']} nodes, link {ablation['link']}")
    ax.legend(fontsize=7)
    batch = ablation["batch"]
    notes = [SIMULATED, f"Without continuous speculation: one speculative run in flight of "
             f"{batch} tokens (the document's larger batch as counter-balance)."]  # fmt: skip
    table = df.assign(source="simulated")
    if len(measured):
        _draw_measured_ablation(axes[0][1], measured)
        notes.append("Right panel and source 'measured': the engine's own ablations "
                     "(PipeInferOptions.cancellation / .continuous) run for real on this "
                     "machine at each stage count, medians over prompts, beside the simulator "
                     "at exactly those settings (measured link and acceptance); every run "
                     "equal to greedy decoding where all_exact.")  # fmt: skip
        table = pd.concat([table, measured.assign(source="measured")], ignore_index=True)
    save_figure(fig, out["png"], out["pdf"])
    write_table(table, out["csv"], out["md"], "Figure 8: ablations", notes)


def _draw_measured_ablation(ax: Any, measured: pd.DataFrame) -> None:
    """Measured (solid) and simulated (hatched) speed per variant, grouped by stage count."""
    stages, variants = list(dict.fromkeys(measured.n_stages)), list(dict.fromkeys(measured.variant))
    width = 0.8 / (2 * len(variants))
    for v, variant in enumerate(variants):
        part = measured[measured.variant == variant].set_index("n_stages").reindex(stages)
        x = [i + 2 * v * width for i in range(len(stages))]
        bars = ax.bar(x, part.measured_tokens_per_s, width, label=f"{variant}, measured")
        ax.bar([p + width for p in x], part.simulated_tokens_per_s, width, hatch="//",
               color=bars.patches[0].get_facecolor(), alpha=0.5)  # fmt: skip
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(stages))],
                  [f"{n} target ranks" for n in stages])  # fmt: skip
    ax.set_ylabel("generation speed (tok/s)")
    ax.set_title("MEASURED on this CPU (solid) vs simulated at its settings (hatched)")
    ax.legend(fontsize=6)
