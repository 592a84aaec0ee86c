"""Config validation: JSON-Schema with defaults, plus cross-key checks the schema cannot say."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    """A config value is wrong; the message names the key."""


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file."""
    with open(path) as fh:
        return yaml.safe_load(fh)


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For oneOf/anyOf failures, the sub-error that got furthest into the config."""
    if not error.context:
        return error
    return max((_deepest(e) for e in error.context), key=lambda e: len(e.absolute_path))


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        parts.append(",".join(extra))
    if error.validator == "required":
        missing = [r for r in error.validator_value if r not in error.instance]
        parts.append(",".join(missing))
    return ".".join(parts) or "<root>"


def _defaulting_validator() -> type:
    """A Draft-7 validator class that fills in `default` values while it validates."""
    base = jsonschema.Draft7Validator
    set_props = base.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):  # noqa: ANN001
        if isinstance(instance, dict):
            for name, sub in props.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from set_props(validator, props, instance, schema)

    return jsonschema.validators.extend(base, {"properties": properties})


def validate(config: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a defaults-filled copy of `config`, or raise ConfigError naming the bad key."""
    filled = copy.deepcopy(dict(config))
    validator = _defaulting_validator()(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        deepest = [_deepest(e) for e in errors[:10]]
        lines = [f"config key '{_key_path(e)}': {e.message}" for e in deepest]
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))
    check_cross_keys(filled)
    return canonical(filled)


def canonical(obj: Any) -> Any:
    """`obj` with every mapping's keys sorted, so that reordering keys in a config file does
    not look like a change to Snakemake's params-based rerun triggers."""
    if isinstance(obj, Mapping):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def check_cross_keys(config: Mapping[str, Any]) -> None:
    """Checks that relate several keys: references resolve, no eval split enters training."""
    datasets = config["data"]["datasets"]
    mirror = config["data"].get("mirror")
    if mirror and not Path(mirror).is_dir():
        raise ConfigError(f"config key 'data.mirror': directory {mirror!r} does not exist")
    pre = config.get("pretrain", {})
    for name in pre.get("sources", []):
        if name not in datasets:
            raise ConfigError(f"config key 'pretrain.sources': unknown dataset {name!r}")
        if datasets[name].get("eval"):
            raise ConfigError(
                f"config key 'pretrain.sources': dataset {name!r} is an evaluation set "
                "(eval: true) and may not enter training"
            )
    for model, spec in config["models"].items():
        if spec.get("pretrain") and not pre.get("sources"):
            raise ConfigError(f"config key 'models.{model}.pretrain': pretrain.sources is empty")
        if not spec.get("pretrain") and not spec.get("hub"):
            raise ConfigError(f"config key 'models.{model}': give either 'hub' or 'pretrain'")
