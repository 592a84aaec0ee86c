"""Config checks of the client-server block `remote` (document 002) that the schema cannot
express (called by `kvspec.config.validate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError

MAX_TREE = 254  # the protocol's 1-byte position field (kvspec.remote.protocol)


def check_remote(config: Mapping[str, Any]) -> None:
    """Heads the moa block trains; a HumanEval set; trees the protocol can carry."""
    remote, moa = config["remote"], config.get("moa")
    if not moa:
        raise ConfigError("config key 'remote': needs the moa block (its trained heads)")
    unknown = sorted(set(remote["drafters"]) - set(moa["drafters"]))
    if unknown:
        raise ConfigError(f"config key 'remote.drafters': {unknown} are not moa.drafters")
    name = remote["set"]
    source = moa["sets"].get(name, {}).get("prompts")
    dataset = config["data"]["datasets"].get(source) or {}
    if dataset.get("kind") != "code":
        raise ConfigError(f"config key 'remote.set': {name!r} is not a set of moa.sets "
                          "holding HumanEval problems (a code dataset)")  # fmt: skip
    if moa["tree"] and moa["tree"]["total"] > MAX_TREE:
        raise ConfigError(f"config key 'moa.tree.total': the protocol's 1-byte position "
                          f"field holds trees of at most {MAX_TREE} nodes")  # fmt: skip
