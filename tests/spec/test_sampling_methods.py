"""Document 004's decoding methods as samplers: greedy runs equal greedy decoding, samples are
seeded, unknown kinds are refused, and the config's cross-key checks name the key."""

import copy

import pytest
import yaml

from kvspec.config import ConfigError, validate
from kvspec.spec.decode import greedy_generate
from kvspec.spec.sampling_methods import Settings, make_sampler
from tests.tiny import tiny_llama

from ..conftest import REPO


@pytest.fixture(scope="module")
def models() -> dict:
    return {"target": tiny_llama(0, vocab=32), "draft": tiny_llama(1, vocab=32),
            "mid": tiny_llama(2, vocab=32)}  # fmt: skip


@pytest.mark.parametrize("kind", ["classical", "sd", "three_model"])
def test_greedy_settings_reproduce_greedy_decoding(models, kind: str) -> None:
    sampler = make_sampler(kind, models, Settings(12, greedy=True, k=3, k_d=2, k_i=2))
    sample = sampler([1, 2, 3], 0)
    assert sample.tokens == greedy_generate(models["target"], [1, 2, 3], 12)
    assert sample.steps >= 1 and sample.seconds > 0


@pytest.mark.parametrize("kind", ["classical", "sd", "sd_printed", "three_model"])
def test_samples_are_seeded(models, kind: str) -> None:
    sampler = make_sampler(kind, models, Settings(10, temperature=0.9, top_p=0.9, k=2))
    assert sampler([4, 5], 3).tokens == sampler([4, 5], 3).tokens
    assert len(sampler([4, 5], 3).tokens) == 10


def test_speculative_counts(models) -> None:
    s = make_sampler("sd", models, Settings(16, temperature=1.0, k=4))([1, 2], 0)
    assert 0 <= s.accepted <= s.drafted and 0 <= s.passing <= s.drafted and s.drafted > 0
    with pytest.raises(ValueError, match="unknown decoding method"):
        make_sampler("medusa", models, Settings(4))


def _config(schema: dict) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["data"]["mirror"] = str(REPO / "tests" / "fixtures" / "mirror")
    return cfg


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s["methods"]["sd_A"].pop("k"), "sampling.methods.sd_A"),
        (lambda s: s["methods"]["sd_A"].update(draft="nope"), "sampling.methods.sd_A.draft"),
        (lambda s: s["figure_9"].append("sd_X"), "sampling.figure_9"),
        (lambda s: s["humaneval"]["methods"].remove("three_model"), "sampling.figure_9"),
        (
            lambda s: s["experiments"]["A"].update(classical="sd_A"),
            "sampling.experiments.A.classical",
        ),
        (lambda s: s["sweep"].update(method="classical"), "sampling.sweep.method"),
    ],
)
def test_bad_sampling_config_names_the_key(schema, edit, key: str) -> None:
    cfg = _config(schema)
    validate(copy.deepcopy(cfg), schema)
    edit(cfg["sampling"])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg, schema)
