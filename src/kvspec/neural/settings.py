"""Config checks of document 002's block `moa` that the schema cannot express (called by
`kvspec.config.validate`, the one place config errors are raised)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError
from kvspec.ngram.registry import METHODS

QUALITY_METRICS = ("humaneval", "gsm8k", "cnndm")  # Table 8's columns, scored per set


def check_moa(config: Mapping[str, Any]) -> None:
    """The target, baselines, prompt sets and chain sets name things that exist."""
    moa, spec = config["moa"], config.get("spec")
    if not spec:
        raise ConfigError("config key 'moa': needs the spec block (its prompt sets)")
    if moa["target"] not in config["models"]:
        raise ConfigError(f"config key 'moa.target': {moa['target']!r} is not a key of models")
    unknown = set(moa["baselines"]) - set(METHODS)
    if unknown or "greedy" in moa["baselines"]:
        raise ConfigError(f"config key 'moa.baselines': {sorted(unknown) or ['greedy']} "
                          "(greedy is always run; others must be speed methods)")  # fmt: skip
    for name, s in moa["sets"].items():
        if s["prompts"] not in spec["heldout"] | config["data"]["datasets"]:
            raise ConfigError(f"config key 'moa.sets.{name}.prompts': {s['prompts']!r} is "
                              "neither a held-out split nor a dataset")  # fmt: skip
    unknown = sorted(set(moa.get("chain_sets") or ()) - set(moa["sets"]))
    if unknown:
        raise ConfigError(f"config key 'moa.chain_sets': {unknown} are not sets of moa.sets")
    _check_extras(config, moa)


def _check_extras(config: Mapping[str, Any], moa: Mapping[str, Any]) -> None:
    """The ablation, quality and alt blocks name existing sets, drafters and models."""
    sets, main = set(moa["sets"]), set(moa["drafters"])
    ablation = moa.get("ablation") or {}
    if ablation and ablation["set"] not in sets:
        raise ConfigError(f"config key 'moa.ablation.set': {ablation['set']!r} is not a set")
    both = sorted(set(ablation.get("drafters") or {}) & main)
    if both:
        raise ConfigError(f"config key 'moa.ablation.drafters': {both} are main drafters")
    for metric, name in ((moa.get("quality") or {}).get("sets") or {}).items():
        if metric not in QUALITY_METRICS or name not in sets:
            raise ConfigError(f"config key 'moa.quality.sets.{metric}': metrics are "
                              f"{QUALITY_METRICS}, each scored on a set of moa.sets, "
                              f"not {name!r}")  # fmt: skip
    sweep = moa.get("vocab_sweep") or {}
    if sweep and (sweep["drafter"] not in main or not ablation):
        raise ConfigError(f"config key 'moa.vocab_sweep.drafter': {sweep['drafter']!r} must "
                          "be a key of moa.drafters; the sweep runs on moa.ablation.set, "
                          "which must be set")  # fmt: skip
    _check_alt(config, moa, main)
    _check_batching(config, moa, main)
    depth = moa["data"]["state_depth"]
    heads = {**moa["drafters"], **(ablation.get("drafters") or {})}
    deep = sorted(n for n, d in heads.items() if int(d.get("tli", 0)) > depth)
    if deep:
        raise ConfigError(f"config key 'moa.data.state_depth': {depth} is below the TLI of {deep}")


def _check_alt(config: Mapping[str, Any], moa: Mapping[str, Any], main: set[str]) -> None:
    alt = moa.get("alt") or {}
    if not alt:
        return
    if alt["target"] not in config["models"] or alt["target"] == moa["target"]:
        raise ConfigError(f"config key 'moa.alt.target': {alt['target']!r} is not a key of "
                          "models other than moa.target")  # fmt: skip
    if alt["target"] not in config["spec"]["generate"]["models"]:
        raise ConfigError(f"config key 'moa.alt.target': {alt['target']!r} has no responses "
                          "to train on: add it to spec.generate.models")  # fmt: skip
    unknown = sorted(set(alt["drafters"]) - main)
    if unknown:
        raise ConfigError(f"config key 'moa.alt.drafters': {unknown} are not main drafters")
    # moa.train holds every key of its schema once validated (defaults filled in)
    unknown = sorted(set(alt.get("train") or {}) - set(moa["train"]))
    if unknown:
        raise ConfigError(f"config key 'moa.alt.train': {unknown} are not keys of moa.train")


def _check_batching(config: Mapping[str, Any], moa: Mapping[str, Any], main: set[str]) -> None:
    """Figure 4: a set of moa.sets, main heads, chain n-gram methods."""
    batching = moa.get("batching") or {}
    if not batching:
        return
    if batching["set"] not in moa["sets"]:
        raise ConfigError(f"config key 'moa.batching.set': {batching['set']!r} is not a set")
    unknown = sorted(set(batching["drafters"]) - main)
    if unknown:
        raise ConfigError(f"config key 'moa.batching.drafters': {unknown} are not main drafters")
    chain = {n for n, d in METHODS.items() if d.loop == "chain" and "draft" not in d.inputs}
    other = sorted(set(batching["baselines"]) - chain)
    if other:
        raise ConfigError(f"config key 'moa.batching.baselines': {other} are not chain methods "
                          "without a draft model")  # fmt: skip
