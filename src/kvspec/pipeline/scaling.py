"""The simulator put to work (document 003, Figures 4-8): calibrated on the real runs of
`pipeline_run`, validated against them, then swept over node counts, links and acceptance
rates this machine cannot hold. Pure Python (no torch): the report layer may import it."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from kvspec.pipeline.simulate import Calibration, Link, Setting, simulate

STRATEGIES = ("iterative", "speculative", "pipeinfer")
METRICS = ("tokens_per_s", "ttft_s", "itl_s")


def estimate_alpha(accepted: float, runs: float, k: int) -> float:
    """Per-token acceptance probability under the geometric model: the alpha whose expected
    accepted drafts per run of k, sum_{i=1..k} alpha^i, equals accepted / runs (bisection)."""
    target = min(max(accepted / runs, 0.0), float(k)) if runs else 0.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if sum(mid**i for i in range(1, k + 1)) < target else (low, mid)
    return (low + high) / 2


def calibration_of(record: Mapping[str, Any]) -> Calibration:
    c = record["calibration"]
    return Calibration(tuple(c["layer"]), tuple(c["head"]), tuple(c["draft"]), c["layers"],
                       c["hidden"], c["bytes_per_value"])  # fmt: skip


def measured_link(rows: Sequence[Mapping[str, Any]]) -> Link:
    """The loopback link: medians of every multi-rank run's measurement."""
    links = [r["link"] for r in rows if r.get("link")]
    if not links:
        raise ValueError("no run measured the link (every run had one stage)")
    return Link(statistics.median(x["latency_s"] for x in links),
                statistics.median(x["bandwidth_bps"] for x in links))  # fmt: skip


def measured_alpha(rows: Sequence[Mapping[str, Any]], k: int) -> float:
    """Acceptance of our draft, from the speculative strategy's runs (k drafts per run)."""
    spec = [r for r in rows if r["strategy"] == "speculative"]
    if not spec:
        raise ValueError("the speculative strategy did not run: no acceptance to calibrate on")
    return estimate_alpha(sum(r["accepted"] for r in spec), sum(r["pipeline_runs"] for r in spec),
                          k)  # fmt: skip


def _median_run(cal: Calibration, link: Link, setting: Setting, seeds: int) -> dict[str, float]:
    runs = [simulate(cal, link, Setting(**{**vars(setting), "seed": s})) for s in range(seeds)]
    return {m: statistics.median(r[m] for r in runs) for m in METRICS} | {
        "cancelled": statistics.median(r["cancelled"] for r in runs)
    }


def validation(record: Mapping[str, Any], seeds: int) -> list[dict[str, Any]]:
    """Each real (strategy, stages) configuration, measured medians beside the simulator's
    prediction with the loopback link and our draft's acceptance."""
    rows, s = record["runs"], record["settings"]
    cal, link = calibration_of(record), measured_link(rows)
    alpha = measured_alpha(rows, s["k"])
    out = []
    for (strategy, n), group in _groups(rows).items():
        setting = _setting(strategy, n, alpha, group, s)
        predicted = _median_run(cal, link, setting, seeds)
        measured = {m: statistics.median(r[m] for r in group) for m in METRICS}
        out.append(
            {
                "strategy": strategy,
                "n_stages": n,
                "alpha": alpha,
                **{f"measured_{m}": measured[m] for m in METRICS},
                **{f"simulated_{m}": predicted[m] for m in METRICS},
                "speed_error": predicted["tokens_per_s"] / measured["tokens_per_s"] - 1,
            }
        )
    return out


def _groups(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    """The strategies' own runs (not their ablations) by (strategy, stages)."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        if not r.get("variant"):
            groups.setdefault((r["strategy"], r["n_stages"]), []).append(r)
    return groups


def _setting(strategy: str, n: int, alpha: float, group: Sequence[Mapping[str, Any]],
             s: Mapping[str, Any], **extra: Any) -> Setting:  # fmt: skip
    prompt = int(statistics.median(r["prompt_tokens"] for r in group))
    return Setting(strategy, n, alpha, prompt=prompt, new_tokens=s["max_new_tokens"], k=s["k"],
                   micro_batch=s["pipeinfer"]["micro_batch"],
                   partitions=s["pipeinfer"]["partitions"], **extra)  # fmt: skip


def curves(record: Mapping[str, Any], links: Mapping[str, Mapping[str, float]],
           alphas: Mapping[str, float], nodes: Sequence[int],
           seeds: int) -> list[dict[str, Any]]:  # fmt: skip
    """Simulated speed, TTFT and ITL per link, acceptance, strategy and node count."""
    rows, s = record["runs"], record["settings"]
    cal = calibration_of(record)
    every_link = {"loopback (measured)": measured_link(rows)} | {
        name: Link(v["latency_s"], v["bandwidth_bps"]) for name, v in links.items()
    }
    every_alpha = {"ours (measured)": measured_alpha(rows, s["k"]), **alphas}
    out = []
    for link_name, link in every_link.items():
        for alpha_name, alpha in every_alpha.items():
            for strategy in STRATEGIES:
                for n in (n for n in nodes if n <= cal.layers):
                    setting = _setting(strategy, n, alpha, rows, s)
                    out.append({"link": link_name, "acceptance": alpha_name, "alpha": alpha,
                                "strategy": strategy, "nodes": n,
                                **_median_run(cal, link, setting, seeds)})  # fmt: skip
    return out


ABLATIONS = {
    "PipeInfer": {},
    "no early cancellation": {"cancellation": False},
    "no continuous speculation": {"continuous": False},
}


def ablation(record: Mapping[str, Any], link: Mapping[str, float] | None,
             alphas: Mapping[str, float], nodes: int, batch: int,
             seeds: int) -> list[dict[str, Any]]:  # fmt: skip
    """Figure 8 at `nodes` nodes (on `link`; None: the measured loopback): PipeInfer without
    cancellation, without continuous speculation (one speculative run in flight, `batch`
    tokens: the document's larger batch as counter-balance), and the two baselines."""
    rows, s = record["runs"], record["settings"]
    cal = calibration_of(record)
    lk = Link(link["latency_s"], link["bandwidth_bps"]) if link else measured_link(rows)
    out = []
    for alpha_name, alpha in alphas.items():
        variants = {name: ("pipeinfer", extra) for name, extra in ABLATIONS.items()}
        variants |= {"speculative": ("speculative", {}), "iterative": ("iterative", {})}
        for name, (strategy, extra) in variants.items():
            setting = _setting(strategy, min(nodes, cal.layers), alpha, rows, s, **extra)
            if name == "no continuous speculation":
                setting = Setting(**{**vars(setting), "micro_batch": batch})
            out.append({"acceptance": alpha_name, "alpha": alpha, "variant": name,
                        **_median_run(cal, lk, setting, seeds)})  # fmt: skip
    return out


def measured_ablation(record: Mapping[str, Any], seeds: int) -> list[dict[str, Any]]:
    """Figure 8 on the real runs: per stage count, PipeInfer, each ablation that ran and the
    two baselines, measured (medians) beside the simulator at those runs' settings (the
    measured link and acceptance; without continuous speculation, runs of the engine's
    `batch` tokens)."""
    rows, s = record["runs"], record["settings"]
    if not s.get("ablations"):
        return []
    cal, link, alpha = calibration_of(record), measured_link(rows), measured_alpha(rows, s["k"])
    names = {"": "PipeInfer", **{a: a for a in s["ablations"]}}
    out = []
    for n in s["n_stages"]:
        groups = {"iterative": ("iterative", ""), "speculative": ("speculative", "")}
        groups |= {name: ("pipeinfer", v) for v, name in names.items()}
        for name, (strategy, variant) in groups.items():
            group = [r for r in rows if (r["strategy"], r["n_stages"]) == (strategy, n)
                     and (r.get("variant") or "") == variant]  # fmt: skip
            if not group:
                continue
            setting = _setting(strategy, n, alpha, group, s, **ABLATIONS.get(variant, {}))
            if variant == "no continuous speculation":
                setting = Setting(**{**vars(setting), "micro_batch": s["pipeinfer"]["batch"]})
            measured = statistics.median(r["tokens_per_s"] for r in group)
            simulated = _median_run(cal, link, setting, seeds)["tokens_per_s"]
            out.append({"n_stages": n, "variant": name, "measured_tokens_per_s": measured,
                        "simulated_tokens_per_s": simulated,
                        "speed_error": simulated / measured - 1,
                        "all_exact": all(r["exact"] for r in group)})  # fmt: skip
    return out


def memory(record: Mapping[str, Any], nodes: Sequence[int]) -> list[dict[str, Any]]:
    """Weight bytes on the busiest node (the head: most layers plus embedding and output
    head) and on the speculative model's node, per node count."""
    b, layers = record["calibration_raw"]["bytes"], record["calibration"]["layers"]
    out = []
    for n in (n for n in nodes if n <= layers):
        head_layers = -(-layers // n)
        out.append({"nodes": n, "head_node_mb": (head_layers * b["layer"] + b["embed"] + b["head"])
                    / 2**20, "other_node_mb": layers // n * b["layer"] / 2**20,
                    "draft_node_mb": b["draft"] / 2**20})  # fmt: skip
    return out
