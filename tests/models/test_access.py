"""Gated hub models: the run stops before any job, naming the model and HF_TOKEN."""

from __future__ import annotations

import pytest
import yaml

from kvspec.models.access import AccessError, check_access, gated_to_fetch

from ..conftest import REPO


def _paper() -> dict:
    return yaml.safe_load((REPO / "config" / "paper.yaml").read_text())


def test_the_paper_scale_downloads_two_gated_models_until_they_exist() -> None:
    cfg = _paper()
    assert gated_to_fetch(cfg, lambda name: False) == [
        ("target", "meta-llama/Llama-3.1-8B-Instruct"),
        ("draft", "meta-llama/Llama-3.2-1B-Instruct"),
    ]
    assert gated_to_fetch(cfg, lambda name: name == "target") == [
        ("draft", "meta-llama/Llama-3.2-1B-Instruct")
    ]
    mini = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert gated_to_fetch(mini, lambda name: False) == []  # packaged models: no hub


def test_a_missing_token_names_the_model_and_the_variable() -> None:
    models = [("target", "meta-llama/Llama-3.1-8B-Instruct")]
    with pytest.raises(AccessError, match=r"models\.target .*meta-llama.*HF_TOKEN"):
        check_access(models, env={})
    check_access([], env={})  # nothing gated left to download: no token needed


def test_a_refused_token_stops_the_run_online_only() -> None:
    models = [("draft", "meta-llama/Llama-3.2-1B-Instruct")]

    def refuse(hub: str, token: str) -> None:
        raise PermissionError(f"403: {token} may not read {hub}")

    with pytest.raises(AccessError, match=r"models\.draft .*refused HF_TOKEN.*403"):
        check_access(models, env={"HF_TOKEN": "hf_x"}, probe=refuse)
    check_access(models, env={"HF_TOKEN": "hf_x", "HF_HUB_OFFLINE": "1"}, probe=refuse)
    seen = []
    check_access(models, env={"HF_TOKEN": "hf_ok"}, probe=lambda h, t: seen.append((h, t)))
    assert seen == [("meta-llama/Llama-3.2-1B-Instruct", "hf_ok")]
