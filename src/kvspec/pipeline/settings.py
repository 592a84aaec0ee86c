"""Config checks of document 003's block `pipeline` that the schema cannot express (called by
`kvspec.config.validate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError


def check_pipeline(config: Mapping[str, Any]) -> None:
    """Models exist; the simulator gets what it calibrates on (the speculative strategy's
    acceptance, a link between two ranks) and an ablation link it knows."""
    pipeline = config["pipeline"]
    if not config.get("spec"):
        raise ConfigError("config key 'pipeline': needs the spec block (its prompt sets)")
    for role in ("target", "draft"):
        if pipeline[role] not in config["models"]:
            raise ConfigError(f"config key 'pipeline.{role}': "
                              f"{pipeline[role]!r} is not a key of models")  # fmt: skip
    if "speculative" not in pipeline["strategies"]:
        raise ConfigError("config key 'pipeline.strategies': the simulator calibrates on "
                          "the speculative strategy; list it")  # fmt: skip
    if max(pipeline["n_stages"]) < 2:
        raise ConfigError("config key 'pipeline.n_stages': the simulator measures the link "
                          "between two ranks; list a stage count of at least 2")  # fmt: skip
    _check_figure_9(config, pipeline["figure_9"])
    sim = pipeline["simulate"]
    slow = sim["constrained_link"]
    if slow is not None and slow not in sim["links"]:
        raise ConfigError(f"config key 'pipeline.simulate.constrained_link': {slow!r} is not "
                          "a key of pipeline.simulate.links")  # fmt: skip
    link = sim["ablation"]["link"]
    if link != "loopback" and link not in sim["links"]:
        raise ConfigError(f"config key 'pipeline.simulate.ablation.link': {link!r} is neither "
                          "'loopback' nor a simulated link")  # fmt: skip


def _check_figure_9(config: Mapping[str, Any], figure: Mapping[str, Any] | None) -> None:
    """Figure 9's pairs: known models, a draft distinct from its target, each pair once."""
    if figure is None:
        return
    pairs = [(p["target"], p["draft"]) for p in figure["pairs"]]
    for i, pair in enumerate(pairs):
        for role, model in zip(("target", "draft"), pair, strict=True):
            if model not in config["models"]:
                raise ConfigError(f"config key 'pipeline.figure_9.pairs[{i}].{role}': "
                                  f"{model!r} is not a key of models")  # fmt: skip
        if pair[0] == pair[1]:
            raise ConfigError(f"config key 'pipeline.figure_9.pairs[{i}]': the draft is the target")
        if pair in pairs[:i]:
            raise ConfigError(f"config key 'pipeline.figure_9.pairs[{i}]': {pair} listed twice")
