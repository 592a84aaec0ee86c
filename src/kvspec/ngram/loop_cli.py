"""Time the speed job's own decoding loop on prompts Table 4.7 does not time, and give each
method's speed over a reference method, paired over the prompts.

    python -m kvspec.ngram.loop_cli [--config config/config.yaml] [--sources humaneval python
        general] [--end 40] [--methods sd_hybrid_target_branches sd_suffix_decoding]
        [--out results/loop_check]

Run in a finished workflow directory (it reads the speed jobs' inputs under `results/`). Each
prompt source (a held-out split, or a dataset of kind code or math) becomes a benchmark set of
its prompts after the ones a Table 4.7 set of the same source times, up to `--end`, and runs
in one process exactly as `specdecode_speed` runs a set (`kvspec.ngram.stages.speed_stage`:
greedy first and last on every prompt, every method checked equal to greedy, untimed warm-ups).
The last listed method is the reference. Prints per set and pooled over the sets the rows of
the workflow's ranking table (`kvspec.report.ranking`): speed over greedy, tokens per target
forward, speed ÷ the reference with its paired standard error over the prompts, runs equal to
greedy. The workflow ranks the methods and sets `spec.ranking` names (`snakemake ranking`);
this check runs other methods or prompts beside it, in a finished directory.
"""

from __future__ import annotations

import argparse
import copy
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kvspec.config import SCHEMA, validate
from kvspec.data.records import read_jsonl
from kvspec.io import read_json
from kvspec.ngram.replay_cli import read_config
from kvspec.ngram.stages import speed_stage
from kvspec.plan import REPO, Plan, paths
from kvspec.report.ranking import ranking_rows

Records = Sequence[Mapping[str, Any]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", type=Path, default=REPO / "config/config.yaml")
    ap.add_argument("--model", default="target")
    ap.add_argument("--sources", nargs="+", default=["humaneval", "python", "general"])
    ap.add_argument("--end", type=int, default=40, help="last prompt index (exclusive)")
    ap.add_argument(
        "--methods", nargs="+", default=["sd_hybrid_target_branches", "sd_suffix_decoding"],
        help="methods to time beside greedy; the last is the reference",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path(paths.LOOP_CHECK))
    args = ap.parse_args(argv)

    config = check_config(read_config(args.config), args.model, args.sources, args.end,
                          args.methods)  # fmt: skip
    plan = Plan(config, REPO)
    records = {}
    for name in config["spec"]["speed"]["runs"][args.model]["sets"]:
        records[name] = [{**r, "set": name} for r in run_set(plan, args.model, name, args.out)]
        print(report(records[name], name, args.methods[-1]), flush=True)
    if len(records) > 1:
        pooled = [r for recs in records.values() for r in recs]
        print(report(pooled, "pooled", args.methods[-1]))


def check_config(
    config: Mapping[str, Any], model: str, sources: Sequence[str], end: int,
    methods: Sequence[str],
) -> dict[str, Any]:  # fmt: skip
    """`config` with one speed set `check<source>` per source, its prompts after those a Table
    4.7 set of that source times up to `end`, and a run of greedy and `methods` on them."""
    if not methods or "greedy" in methods:
        raise SystemExit("--methods lists the methods timed beside greedy (greedy always runs)")
    out = copy.deepcopy(dict(config))
    speed = out["spec"]["speed"]
    sets = {}
    for source in sources:
        skip = timed_prompts(speed, out["spec"]["target"], source)
        n = min(end, available(out, source)) - skip
        if n < 2:
            raise SystemExit(f"{source}: {n} prompts after the {skip} Table 4.7 times (--end)")
        sets[f"check{source}"] = {"prompts": source, "n": n} | ({"skip": skip} if skip else {})
    speed["sets"] |= sets
    speed["runs"][model] = {"sets": list(sets), "methods": ["greedy", *methods]}
    out["spec"]["ranking"] = None  # the workflow's own ranking; this check replaces the run
    return validate(out, yaml.safe_load(SCHEMA.read_text()))


def timed_prompts(speed: Mapping[str, Any], target: str, source: str) -> int:
    """How many of `source`'s first prompts the main target's Table 4.7 sets time."""
    table = speed["runs"][target]["sets"][:2]
    used = [speed["sets"][s] for s in table if speed["sets"][s]["prompts"] == source]
    return max((s.get("skip", 0) + s["n"] for s in used), default=0)


def available(config: Mapping[str, Any], source: str) -> int:
    """Prompts of `source` in the workflow's files: a held-out split's or a dataset's."""
    held = source in config["spec"]["heldout"]
    if not held and source not in config["data"]["datasets"]:
        raise SystemExit(f"{source!r} is neither a held-out split nor a dataset")
    path = paths.PROMPTS if held else paths.DATA.format(dataset=source)
    _need([path])
    return sum(r["split"] == source if held else 1 for r in read_jsonl(path))


def _need(files: Sequence[str]) -> None:
    """Stop with the list of the workflow's outputs this check reads that are not there."""
    missing = [f for f in files if not Path(f).exists()]
    if missing:
        raise SystemExit("not a finished workflow directory (run `snakemake thesis` first); "
                         f"missing: {', '.join(missing)}")  # fmt: skip


def run_set(plan: Plan, model: str, name: str, out: Path) -> list[dict[str, Any]]:
    """The speed job's run of set `name`, written under `out`; its records."""
    w = types.SimpleNamespace(model=model, bench=name)
    inputs = plan.spec.speed_inputs(w)
    _need(list(inputs.values()))
    runs, summary = out / model / f"{name}.json", out / model / f"{name}.csv"
    runs.parent.mkdir(parents=True, exist_ok=True)
    speed_stage(inputs, str(runs), str(summary), model=model,
                threads=plan.config["resources"]["threads"],
                **plan.params("specdecode_speed")(w))  # fmt: skip
    return read_json(runs)["records"]


def report(records: Records, name: str, reference: str) -> str:
    """Per method: speed over greedy, tokens per forward, and ÷ `reference` (paired SE), and
    how many runs equal greedy decoding (`kvspec.report.ranking.ranking_rows`)."""
    rows = ranking_rows(records, name, reference)
    lines = [f"{name}: {rows[0]['prompts']} prompts"]
    for row in rows:
        line = (f"  {row['method']:28s} {row['x_greedy']:.3f}x greedy, "
                f"{row['tokens_per_forward']:.2f} tokens a forward")  # fmt: skip
        if row["method"] != reference:
            line += (f", / {reference} {row[f'vs_{reference}']:.3f} "
                     f"+- {row[f'vs_{reference}_se']:.3f}")  # fmt: skip
        line += f"; {row['equal_to_greedy']} runs equal to greedy"
        if row["widest_tie_where_not"] is not None:
            line += f" (the others first differ at ties {row['widest_tie_where_not']:.1e} apart)"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
