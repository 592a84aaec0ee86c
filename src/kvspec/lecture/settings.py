"""Cross-key checks of the `lecture:` config block that a JSON schema cannot express."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.errors import ConfigError


def _need(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {message}")


def check_lecture(config: Mapping[str, Any]) -> None:
    """Raise ConfigError (naming the key) if the lecture block refers to anything undefined."""
    lecture, models = config["lecture"], config["models"]
    _need(lecture["model"] in models, "lecture.model", f"unknown model {lecture['model']!r}")
    for name in lecture["kv_cache"]["models"]:
        _need(name in models, "lecture.kv_cache.models", f"unknown model {name!r}")
    draft = lecture["speculative"]["draft"]
    _need(draft in models, "lecture.speculative.draft", f"unknown model {draft!r}")
    _check_quantization(config, lecture["quantization"])
    spec = config.get("spec")
    for example in ("speculative", "scheduling"):
        key = f"lecture.{example}.prompts"
        _need(bool(spec), key, "the lecture's prompt sets come from the spec block, which is off")
        name = lecture[example]["prompts"]
        _need(name in spec["speed"]["sets"], key, f"{name!r} is not a key of spec.speed.sets")
    low, high = lecture["scheduling"]["new_tokens"]
    _need(low <= high, "lecture.scheduling.new_tokens", f"[{low}, {high}] is not a range")


def _check_quantization(config: Mapping[str, Any], quant: Mapping[str, Any]) -> None:
    dataset = config["data"]["datasets"].get(quant["calibration"])
    _need(
        dataset is not None and dataset["kind"] in ("text", "instruction"),
        "lecture.quantization.calibration",
        f"{quant['calibration']!r} is not a text or instruction dataset of data.datasets",
    )
    for col in quant["columns"]:
        _need(col in config["eval"]["tasks"], "lecture.quantization.columns",
              f"{col!r} is not a column of eval.tasks")  # fmt: skip
