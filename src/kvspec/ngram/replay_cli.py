"""Score n-gram drafting policies on held-out prompts by replaying the target's greedy outputs.

    python -m kvspec.ngram.replay_cli [--config config/config.yaml] [--humaneval 10:40]
        [--splits general python alpaca] [--methods sd_hybrid_target sd_suffix_decoding]
        [--variant "before: adaptive.k=8 adaptive.local=prompt_lookup" "config:"]

Run in a finished workflow directory (it reads the speed jobs' inputs under `results/`: the
target, its indexes and acceptance rows, the suffix-tree build). Greedy outputs come from the
held-out target responses the workflow recorded (`--splits`) and from HumanEval prompts
decoded here (`--humaneval a:b`; by default the problems after the Table 4.7 benchmark's
`spec.speed.sets.humaneval.n`, up to 40, so knobs are chosen on problems it does not time). The
verification cost of 1 … k + 1 positions is measured once on the target, then every method
is replayed (`kvspec.ngram.replay`) with each variant of the config's `spec.decode` block:
`--variant "label: key=value key=value"` (no changes: the config itself), all against the
same costs. Prints accepted length, drafted tokens and draft time per step and the predicted
speed-up over greedy per set, variant and method. A prediction for choosing knobs; the speed
benchmark (`specdecode_speed`) measures.
"""

from __future__ import annotations

import argparse
import copy
import types
from pathlib import Path
from typing import Any

import yaml

from kvspec.config import SCHEMA, validate
from kvspec.data.records import read_jsonl
from kvspec.decoding.generate import stop_ids
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.prompts import bench_prompts
from kvspec.decoding.verify_cost import verify_costs
from kvspec.io import read_rows
from kvspec.models.load import load_model, use_threads
from kvspec.ngram.methods import (
    TREE_DRAFTERS,
    DecodeSettings,
    Setup,
    input_indexes,
    make_drafter,
    open_engines,
)
from kvspec.ngram.registry import method
from kvspec.ngram.replay import replay
from kvspec.ngram.stages import suffix_corpus
from kvspec.plan import REPO, Plan

Runs = list[tuple[list[int], list[int]]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", type=Path, default=REPO / "config/config.yaml")
    ap.add_argument("--model", default="target")
    ap.add_argument(
        "--humaneval",
        default=None,
        help="HumanEval prompts a:b decoded here (default: the benchmark's n to 40)",
    )
    ap.add_argument("--splits", nargs="*", default=["general", "python", "alpaca"])
    ap.add_argument("--methods", nargs="+", default=["sd_hybrid_target", "sd_suffix_decoding"])
    ap.add_argument(
        "--variant", nargs="+", default=["config:"], help='"label: key=value ..." per variant'
    )
    args = ap.parse_args(argv)

    config = read_config(args.config)
    plan = Plan(config, REPO).spec
    inputs = plan.speed_inputs(types.SimpleNamespace(model=args.model, bench="humaneval"))
    res = config["resources"]
    use_threads(res["threads"])
    target, tokenizer = load_model(inputs["model"], dtype=res["dtype"], device="cpu",
                                   linear=res["linear"])  # fmt: skip
    variants = {label: DecodeSettings.from_config(_changed(config["spec"]["decode"], changes))
                for label, changes in map(_variant, args.variant)}  # fmt: skip
    sets = _held_out(inputs["responses"], args.splits)
    new_tokens = config["spec"]["speed"]["max_new_tokens"]
    bench = plan.bench_set("humaneval")
    span = held_out_span(bench["n"]) if args.humaneval is None else args.humaneval
    humaneval = _humaneval(target, tokenizer, inputs["prompts"], span, bench, new_tokens)
    sets = {**humaneval, **sets}
    sets = {name: runs for name, runs in sets.items() if runs}
    if not sets:
        raise SystemExit("no greedy outputs to replay: check --humaneval and --splits")
    costs = _costs(target, sets, variants.values())
    support = config["spec"]["index"]["max_support"]
    for name, runs in sets.items():
        for label, settings in variants.items():
            setup = _setup(target, tokenizer, settings, inputs, support)
            for m in args.methods:
                print(_row(name, label, m, _replay(m, setup, runs, costs), len(runs)))


def _costs(target: Any, sets: dict[str, Runs], variants: Any) -> dict[int, float]:
    """Seconds of a forward of 1 … (longest draft + 1) positions after a recorded context."""
    widest = max(max(v.k, v.adaptive_k, v.local_tree["index_k"]) for v in variants)
    prompt, output = next(iter(sets.values()))[0]
    costs = verify_costs(target, [*prompt, *output[:64]], range(1, widest + 2))
    print("verification cost (x one position): "
          + ", ".join(f"{q}: {t / costs[1]:.2f}" for q, t in costs.items()))  # fmt: skip
    return costs


def _row(name: str, label: str, method_name: str, r: Any, outputs: int) -> str:
    return (f"{name:14s} {label:10s} {method_name:28s} accepted length {r.accept_len:.2f}  "
            f"drafted {r.drafted / r.steps:.2f}  draft {1e3 * r.draft_seconds / r.steps:.2f} ms"
            f"  predicted {r.speedup:.3f}x greedy  ({outputs} outputs)")  # fmt: skip


def _variant(text: str) -> tuple[str, list[str]]:
    """("label", ["key=value", ...]) from "label: key=value key=value"."""
    label, sep, changes = text.partition(":")
    if not sep or not label.strip():
        raise SystemExit(f'--variant takes "label: key=value ...", got {text!r}')
    return label.strip(), changes.split()


def read_config(path: Path) -> dict[str, Any]:
    """A config file validated against the schema, its defaults filled in."""
    return validate(yaml.safe_load(path.read_text()), yaml.safe_load(SCHEMA.read_text()))


def _changed(decode: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """`decode` with dotted `key=value` changes (values parsed as YAML)."""
    out = copy.deepcopy(decode)
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep:
            raise SystemExit(f"a spec.decode change is key=value, got {change!r}")
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            raise SystemExit(f"spec.decode has no key {key!r}")
        node[last] = yaml.safe_load(value)
    return out


def _held_out(responses: str, splits: list[str]) -> dict[str, Runs]:
    """(prompt, greedy response) ids of the recorded held-out responses, per split."""
    sets: dict[str, Runs] = {s: [] for s in splits}
    for r in read_jsonl(responses):
        if r["split"] in sets and r["response_ids"]:
            sets[r["split"]].append((list(r["prompt_ids"]), list(r["response_ids"])))
    return sets


def held_out_span(benchmarked: int, end: int = 40) -> str:
    """The default `--humaneval` span: the problems after the `benchmarked` ones Table 4.7
    times, up to `end` ("" when the benchmark already takes them all)."""
    return f"{benchmarked}:{end}" if benchmarked < end else ""


def _humaneval(
    target: Any, tokenizer: Any, prompts: str, span: str, bench: dict, new_tokens: int
) -> dict:
    """Greedy outputs of HumanEval prompts a:b of benchmark set `bench`, decoded here ({} for
    an empty span)."""
    if not span:
        return {}
    lo, sep, hi = span.partition(":")
    if not (sep and lo.isdigit() and hi.isdigit()) or int(hi) <= int(lo):
        raise SystemExit(f"--humaneval takes a:b with a < b (prompt indices), got {span!r}")
    stops = stop_ids(target, tokenizer)
    chosen = bench_prompts(read_jsonl(prompts), {**bench, "n": int(hi)}, tokenizer)[int(lo) :]
    runs = [(ids, greedy_generate(target, ids, new_tokens, stops)) for _, ids in chosen]
    return {f"HumanEval/{lo}-{int(hi) - 1}": runs}


def _setup(
    target: Any, tokenizer: Any, settings: DecodeSettings, inputs: dict, max_support: int
) -> Setup:
    calib = {n.removeprefix("calib_index_"): read_rows(p)
             for n, p in inputs.items() if n.startswith("calib_index_")}  # fmt: skip
    return Setup(
        target, stop_ids(target, tokenizer), 0, settings,
        engines=open_engines(input_indexes(inputs), max_support), calibrations=calib,
        arctic_suffix=inputs.get("arctic_suffix"),
        corpus=suffix_corpus(inputs["responses"]) if "arctic_suffix" in inputs else (),
    )  # fmt: skip


def _replay(name: str, setup: Setup, runs: Runs, costs: dict[int, float]) -> Any:
    decl = method(name)
    if decl.loop == "chain":
        drafter, k = make_drafter(name, setup)
        return replay(drafter, runs, costs, k)
    if decl.loop == "tree":
        return replay(TREE_DRAFTERS[decl.drafter](name, decl, setup), runs, costs)
    raise SystemExit(f"{name} is not a drafting method of our loops (loop {decl.loop!r})")


if __name__ == "__main__":
    main()
