"""Shared fixtures: repository paths, the offline mirror, the validated configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE_MIRROR = REPO / "tests" / "fixtures" / "mirror"


def shared_mirror() -> Path | None:
    """The offline dataset mirror (KVSPEC_DATA_MIRROR, else ../shared/data), if present."""
    env = os.environ.get("KVSPEC_DATA_MIRROR")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


@pytest.fixture()
def mini_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())
