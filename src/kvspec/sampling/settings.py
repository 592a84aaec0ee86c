"""Cross-key checks of the `sampling:` config block (document 004) beyond its schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError

NEEDS = {"classical": (), "sd": ("draft", "k"), "sd_printed": ("draft", "k"),
         "three_model": ("draft", "mid", "k_d", "k_i")}  # fmt: skip


def _need(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {message}")


def check_sampling(config: Mapping[str, Any]) -> None:
    """Methods name real models and carry their depths; every figure's methods are run by the
    stage its numbers come from, with the classical baseline beside them."""
    s, models = config["sampling"], config["models"]
    _need(s["target"] in models, "sampling.target", f"unknown model {s['target']!r}")
    for name, m in s["methods"].items():
        for field in NEEDS[m["kind"]]:
            _need(field in m, f"sampling.methods.{name}", f"a {m['kind']} method needs {field}")
        cut_ok = "stop_below" not in m or m["kind"] in ("sd", "sd_printed")
        _need(cut_ok, f"sampling.methods.{name}.stop_below", "only sd / sd_printed drafts are cut")
        for role in ("target", "draft", "mid"):
            if role in m:
                _need(m[role] in models, f"sampling.methods.{name}.{role}",
                      f"unknown model {m[role]!r}")  # fmt: skip
    runs = {"humaneval": s["humaneval"]["methods"], "timing": s["timing"]["methods"]}
    for key, names in {**runs, "figure_9": s["figure_9"], "figure_10": s["figure_10"],
                       "printed": s["printed"]}.items():  # fmt: skip
        unknown = sorted(set(names) - set(s["methods"]))
        _need(not unknown, f"sampling.{key}", f"{unknown} are not keys of sampling.methods")
    _subset(s["figure_9"], runs["humaneval"], "figure_9", "humaneval")
    _subset(s["printed"], runs["humaneval"], "printed", "humaneval")
    _subset(s["figure_10"], runs["timing"], "figure_10", "timing")
    for exp, pair in s["experiments"].items():
        both = [pair["classical"], pair["speculative"]]
        _subset(both, runs["humaneval"], f"experiments.{exp}", "humaneval")
        _subset([*both, *pair["variants"]], runs["timing"], f"experiments.{exp}", "timing")
        kind = s["methods"].get(pair["classical"], {}).get("kind")
        _need(kind == "classical", f"sampling.experiments.{exp}.classical",
              f"{pair['classical']!r} is not a classical method")  # fmt: skip
    _need(s["humaneval"]["problems"] != "pilot" or bool(s.get("pilot")), "sampling.pilot",
          "humaneval.problems 'pilot' needs a sampling.pilot block")  # fmt: skip
    for key in ("sweep", "math500"):
        name = s[key]["method"]
        _need(
            s["methods"].get(name, {}).get("kind") in ("sd", "three_model"),
            f"sampling.{key}.method",
            f"{name!r} is not an exact speculative method",
        )


def _subset(names: list[str], run: list[str], key: str, stage: str) -> None:
    missing = sorted(set(names) - set(run))
    _need(not missing, f"sampling.{key}", f"{missing} are not run by sampling.{stage}.methods")
