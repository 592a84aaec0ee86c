"""Cross-key checks of the `spec:` config block that a JSON schema cannot express."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError


def check_spec(config: Mapping[str, Any]) -> None:
    """Raise ConfigError (naming the key) if the spec block refers to anything undefined."""
    spec, models, datasets = config["spec"], config["models"], config["data"]["datasets"]
    for role in ("target", "draft"):
        _need(spec[role] in models, f"spec.{role}", f"unknown model {spec[role]!r}")
    for name in spec["prompts"]["sources"]:
        kind = datasets.get(name, {}).get("kind")
        _need(
            kind == "instruction", "spec.prompts.sources", f"{name!r} is not an instruction dataset"
        )
    for set_name, held in spec["heldout"].items():
        extra = set(held["sources"]) - set(spec["prompts"]["sources"])
        _need(
            not extra,
            f"spec.heldout.{set_name}.sources",
            f"{sorted(extra)} not in spec.prompts.sources",
        )
    _check_generate(spec, models)
    _check_acceptance(spec)
    _check_speed(spec, datasets, models)
    _check_drafts(spec, models)
    _check_mla_target(config)
    _check_ranking(spec)


def _need(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {message}")


def _check_generate(spec: Mapping[str, Any], models: Mapping[str, Any]) -> None:
    for model in spec["generate"]["models"]:
        _need(model in models, "spec.generate.models", f"unknown model {model!r}")
    _need(
        spec["target"] in spec["generate"]["models"],
        "spec.generate.models",
        f"the target {spec['target']!r} must generate responses (its index is analysed)",
    )
    _need(1.0 in spec["index"]["sft_fractions"], "spec.index.sft_fractions", "must include 1.0")


def _check_acceptance(spec: Mapping[str, Any]) -> None:
    acc = spec["acceptance"]
    for name in [*acc["heldout"], acc["sweep_heldout"]]:
        _need(name in spec["heldout"], "spec.acceptance", f"unknown held-out set {name!r}")


def _check_speed(
    spec: Mapping[str, Any], datasets: Mapping[str, Any], models: Mapping[str, Any]
) -> None:
    speed = spec["speed"]
    for name, bench in speed["sets"].items():
        src = bench["prompts"]
        kind = datasets.get(src, {}).get("kind")
        ok = src in spec["heldout"] or kind in ("code", "math", "prompt")
        _need(
            ok,
            f"spec.speed.sets.{name}.prompts",
            f"{src!r} is no held-out set or code/math/prompt dataset",
        )
    for model, run in speed["runs"].items():
        key = f"spec.speed.runs.{model}"
        _need(model in spec["generate"]["models"], key, "the model must be in spec.generate.models")
        peers = [m for m in run["methods"] if m.startswith("llamacpp_")]
        _need(not peers or bool(models[model].get("gguf")), f"{key}.methods",
              f"{peers} run llama.cpp on the model's own GGUF file, and {model!r} has no "
              "models.<name>.gguf source")  # fmt: skip
        for name in run["sets"]:
            _need(name in speed["sets"], f"{key}.sets", f"unknown benchmark set {name!r}")
        _need("greedy" in run["methods"], f"{key}.methods", "the baseline 'greedy' must be listed")


def _check_drafts(spec: Mapping[str, Any], models: Mapping[str, Any]) -> None:
    drafts = spec.get("drafts")
    if not drafts:
        return
    for name in drafts["models"]:
        _need(name in models, "spec.drafts.models", f"unknown model {name!r}")
    for name in drafts["sets"]:
        _need(name in spec["speed"]["sets"], "spec.drafts.sets", f"unknown benchmark set {name!r}")


def _check_mla_target(config: Mapping[str, Any]) -> None:
    """The long-context MLA run: a restored, healed row of the GQA target, a known benchmark
    set, chain methods of the target-response index."""
    from kvspec.ngram.registry import METHODS

    spec = config["spec"]
    mla = spec.get("mla_target")
    if not mla:
        return
    heal = (config.get("care") or {}).get("heal") or {}
    key = "spec.mla_target"
    _need(heal.get("model") == spec["target"], key,
          f"needs care.heal with model {spec['target']!r} (spec.target)")  # fmt: skip
    restored = [m for m in heal.get("methods", []) if m != "svd"]
    _need(mla["method"] in restored, f"{key}.method",
          f"{mla['method']!r} is not a restored care.heal.methods row {restored}")  # fmt: skip
    _need(mla["bench"] in spec["speed"]["sets"], f"{key}.bench",
          f"{mla['bench']!r} is not in spec.speed.sets")  # fmt: skip
    for name in mla["methods"]:
        decl = METHODS.get(name)
        _need(decl is not None and decl.loop == "chain" and decl.index in (None, "target")
              and "draft" not in decl.inputs, f"{key}.methods",
              f"{name!r} is not a chain method drafting from the target-response index or "
              "the prompt")  # fmt: skip


def _check_ranking(spec: Mapping[str, Any]) -> None:
    """The ranking's sets are the main target's own: known, none of Table 4.7's, and none
    sharing a prompt with a set of the same source the target's run times."""
    ranking = spec.get("ranking")
    if not ranking:
        return
    sets, run = spec["speed"]["sets"], spec["speed"]["runs"].get(spec["target"], {})
    _need("greedy" not in ranking["methods"], "spec.ranking.methods",
          "list the methods timed beside greedy (greedy always runs)")  # fmt: skip
    for name in ranking["sets"]:
        _need(name in sets, "spec.ranking.sets", f"unknown benchmark set {name!r}")
        _need(
            name not in run.get("sets", []),
            "spec.ranking.sets",
            f"{name!r} is a set of the target's run (spec.speed.runs), timed with its methods",
        )
        for other in run.get("sets", []):
            _need(
                not _overlap(sets[name], sets[other]),
                "spec.ranking.sets",
                f"{name!r} shares prompts with {other!r}; start it after them (skip)",
            )


def _overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two benchmark sets may take a common prompt: the same source, and ranges that
    meet or, for a prompt dataset, other categories (their turn orders differ)."""
    start_a, start_b = a.get("skip", 0), b.get("skip", 0)
    meet = start_a < start_b + b["n"] and start_b < start_a + a["n"]
    other_order = a.get("categories") != b.get("categories")
    return a["prompts"] == b["prompts"] and (meet or other_order)
