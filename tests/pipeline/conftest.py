"""Saved tiny models for the multi-process pipeline tests (torchrun and srun)."""

from __future__ import annotations

import pytest

from tests.pipeline.test_stage import tiny_llama


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """A 5-layer target and a 1-layer draft (another seed), saved; {name: directory}."""
    root = tmp_path_factory.mktemp("pipeline_models")
    out = {}
    for name, seed, layers in (("target", 0, 5), ("draft", 1, 1)):
        tiny_llama(seed, layers).save_pretrained(root / name)
        out[name] = str(root / name)
    return out
