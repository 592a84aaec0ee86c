"""Gated hub models (Meta's Llama family): the run stops before any job when one of them still
has to be downloaded and the token to do so is missing or refused, naming the model and the
variable, instead of failing deep inside a download job."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

GATED_PREFIXES = ("meta-llama/",)  # repositories whose licence must be accepted on the hub
TOKEN_VARIABLE = "HF_TOKEN"


class AccessError(RuntimeError):
    """A gated model cannot be downloaded with the credentials of this run."""


def gated_to_fetch(config: Mapping[str, Any], have: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(config name, hub id) of the gated hub models the run still has to download."""
    hub = {name: str(decl.get("hub") or "") for name, decl in config["models"].items()}
    return [(n, h) for n, h in hub.items() if h.startswith(GATED_PREFIXES) and not have(n)]


def check_access(models: list[tuple[str, str]], env: Mapping[str, str] | None = None,
                 probe: Callable[[str, str], None] | None = None) -> None:  # fmt: skip
    """Refuse when a listed model needs a token the environment lacks, or (online) the hub
    refuses the token for it. `probe(hub_id, token)` raises on refusal (default: the hub's
    `auth_check`); offline runs (HF_HUB_OFFLINE=1) only check that the token is set."""
    env = os.environ if env is None else env
    if not models:
        return
    token = env.get(TOKEN_VARIABLE)
    names = ", ".join(f"models.{n} ({hub})" for n, hub in models)
    if not token:
        raise AccessError(f"{names}: gated on the Hugging Face hub; accept the licence on the "
                          f"model page and export {TOKEN_VARIABLE}=<your token> before the "
                          "run")  # fmt: skip
    if env.get("HF_HUB_OFFLINE") == "1":
        return
    probe = probe or _hub_probe
    for name, hub in models:
        try:
            probe(hub, token)
        except Exception as err:  # noqa: BLE001 - any refusal stops the run, with its cause
            raise AccessError(f"models.{name} ({hub}): the hub refused {TOKEN_VARIABLE} "
                              f"({type(err).__name__}: {err})") from None  # fmt: skip


def _hub_probe(hub_id: str, token: str) -> None:
    from huggingface_hub import auth_check

    auth_check(hub_id, token=token)


def check_run(config: Mapping[str, Any], model_dir: str) -> None:
    """Before the first job (not in a dry run): the gated models the run still downloads
    (`model_dir`: the pattern of a fetched model's directory) can be downloaded."""
    from pathlib import Path

    check_access(gated_to_fetch(config, lambda name: Path(model_dir.format(model=name)).exists()))
