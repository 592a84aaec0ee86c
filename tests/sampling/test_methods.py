"""Document 004's decoding methods as samplers: greedy runs equal greedy decoding, samples are
seeded, unknown kinds are refused, and the config's cross-key checks name the key."""

import copy

import numpy as np
import pytest
import torch
import yaml
from scipy.stats import chisquare

from kvspec.config import ConfigError, validate
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.warp import warp
from kvspec.sampling.methods import Settings, make_batch_sampler, make_sampler
from kvspec.seeds import derive
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


@pytest.mark.parametrize("kind", ["classical", "sd", "sd_printed", "three_model"])
def test_models_on_a_second_device_draw_the_cpu_s_samples(kind: str, second_device) -> None:
    """The paper scale samples on GPUs: with every model on a second torch device
    (tests/second_device.py) a seeded sample is the CPU's, token for token."""

    def models(device: str) -> dict:
        return {n: tiny_llama(i, vocab=32).to(device)
                for i, n in enumerate(("target", "draft", "mid"))}  # fmt: skip

    s = Settings(10, temperature=0.9, top_p=0.9, k=2)
    on_cpu = make_sampler(kind, models("cpu"), s)([4, 5], 3)
    assert make_sampler(kind, models(second_device), s)([4, 5], 3).tokens == on_cpu.tokens


@pytest.mark.parametrize("engine", [None, "packed"])
def test_batched_classical_samples_are_the_single_samples_of_their_seeds(engine) -> None:
    """humaneval_stage decodes a problem's classical samples as one batch: each row is the
    sample `make_sampler` draws for its seed, token for token, a stop ending its own row only
    (PyTorch's linear layers; the packed engine of the mini scale)."""
    from kvspec.decoding.packed import pack_linears

    target = tiny_llama(0, vocab=32)
    models = {"target": pack_linears(target.float(), engine) if engine else target}
    seeds = [derive(3, "humaneval", 0, c) for c in range(6)]
    free = Settings(12, temperature=1.2, top_p=0.9)
    alone = [make_sampler("classical", models, free)([4, 5], x).tokens for x in seeds]
    assert len({tuple(t) for t in alone}) > 1
    s = Settings(12, temperature=1.2, top_p=0.9, stops=(alone[1][4],))
    single = [make_sampler("classical", models, s)([4, 5], x) for x in seeds]
    rows = make_batch_sampler("classical", models, s)([4, 5], seeds)
    assert [r.tokens for r in rows] == [x.tokens for x in single]
    assert len(rows[1].tokens) <= 5 and any(len(r.tokens) == 12 for r in rows)
    assert {r.batch for r in rows} == {6} and all(r.steps == len(r.tokens) for r in rows)
    for kind, settings in (("sd", s), ("three_model", s), ("classical", Settings(12, greedy=True))):
        assert make_batch_sampler(kind, models, settings) is None


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
        (
            lambda s: s["methods"]["three_model"].update(stop_below=0.5),
            "sampling.methods.three_model.stop_below",
        ),
        (lambda s: s["timing"]["methods"].remove("sd_B_cut"), "sampling.experiments.B"),
    ],
)
def test_bad_sampling_config_names_the_key(schema, edit, key: str) -> None:
    cfg = _config(schema)
    validate(copy.deepcopy(cfg), schema)
    edit(cfg["sampling"])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg, schema)


# ---- exactness through the entry point the rules call -------------------------------------------
# The first three tokens each sampler emits, over many sample seeds split from one run seed as
# the stages split them, against the warped target's exact law of three tokens (enumerated).
# k >= 2 with temperature and top-p: three_model's inner and outer verifiers and sd's draft and
# verifier must draw from independent streams, or the joint law is off (caught at p ~ 1e-58
# when both levels of three_model shared one seed).
VOCAB, TEMPERATURE, TOP_P, PROMPT = 5, 0.8, 0.9, [1, 3, 2]


def _sharp(seed: int, scale: float, double: bool = True):
    model = tiny_llama(seed, vocab=VOCAB, hidden=16, intermediate=32, layers=1, double=double)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def sharp_models() -> dict:
    return {"target": _sharp(3, 8.0), "mid": _sharp(4, 6.0), "draft": _sharp(5, 6.0)}


@torch.inference_mode()
def _law3(model) -> np.ndarray:
    """P(x1, x2, x3 | PROMPT) under warp(temperature, top_p), shape (V, V, V)."""
    law = np.ones((1,))
    prefixes: list[list[int]] = [[]]
    for _ in range(3):
        ids = torch.tensor([PROMPT + p for p in prefixes])
        nxt = warp(model(ids).logits[:, -1], TEMPERATURE, TOP_P).numpy()  # (len(prefixes), V)
        law = (law[:, None] * nxt).ravel()
        prefixes = [p + [t] for p in prefixes for t in range(VOCAB)]
    return law.reshape(VOCAB, VOCAB, VOCAB)


def _pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    keep = law.ravel() > 1e-12
    if counts.ravel()[~keep].sum():
        return 0.0
    expected = law.ravel()[keep] / law.ravel()[keep].sum() * counts.sum()
    return float(chisquare(counts.ravel()[keep], expected).pvalue)


def _draw(sampler, draws: int) -> np.ndarray:
    counts = np.zeros((VOCAB,) * 3, dtype=np.int64)
    for c in range(draws):
        tokens = sampler(PROMPT, derive(7, "humaneval", 0, c)).tokens
        counts[tuple(tokens[:3])] += 1
    return counts


@pytest.mark.parametrize(
    ("kind", "exact"),
    [("classical", True), ("sd", True), ("three_model", True), ("sd_printed", False)],
)
def test_make_sampler_follows_the_warped_target_law_of_three_tokens(sharp_models, kind, exact):
    settings = Settings(3, temperature=TEMPERATURE, top_p=TOP_P, k=2, k_d=2, k_i=2)
    counts = _draw(make_sampler(kind, sharp_models, settings), 2000)
    p = _pvalue(counts, _law3(sharp_models["target"]))
    assert (p > 1e-3) if exact else (p < 1e-6), p


def test_a_draft_cut_by_its_own_probability_keeps_the_target_law(sharp_models):
    """sd with `stop_below` (Figures 5 / 7's timed variants): drafts end after a token the
    draft drew with probability below the cut-off, so steps draft fewer tokens, and the three
    tokens still follow the target's law."""
    full = Settings(3, temperature=TEMPERATURE, top_p=TOP_P, k=3)
    cut = Settings(3, temperature=TEMPERATURE, top_p=TOP_P, k=3, stop_below=0.6)
    drafted = {name: sum(make_sampler("sd", sharp_models, s)(PROMPT, derive(7, "n", c)).drafted
                         for c in range(50))
               for name, s in (("full", full), ("cut", cut))}  # fmt: skip
    assert drafted["cut"] < 0.9 * drafted["full"], drafted
    counts = _draw(make_sampler("sd", sharp_models, cut), 2000)
    p = _pvalue(counts, _law3(sharp_models["target"]))
    assert p > 1e-3, p


@pytest.mark.parametrize("kind", ["sd", "three_model"])
def test_drafts_with_a_reduced_vocabulary_keep_the_target_law(sharp_models, kind):
    """Drafts reading out over 3 of the 5 tokens (q = 0 on the other two, where the target
    puts mass): the verifiers still return the target's exact law of three tokens."""
    from kvspec.models.draft_vocab import attach_reduced_head

    models = copy.deepcopy(sharp_models)
    for name in ("draft", "mid"):
        attach_reduced_head(models[name], [0, 2, 4])
    law = _law3(models["draft"])
    assert law[1].sum() == 0 and law[:, 3].sum() == 0  # the draft never proposes 1 or 3
    assert _law3(models["target"])[1].sum() > 0.05  # the target does
    settings = Settings(3, temperature=TEMPERATURE, top_p=TOP_P, k=2, k_d=2, k_i=2)
    counts = _draw(make_sampler(kind, models, settings), 2000)
    p = _pvalue(counts, _law3(models["target"]))
    assert p > 1e-3, p


@pytest.mark.parametrize(("kind", "exact"), [("sd", True), ("three_model", True),
                                           ("sd_printed", False)])  # fmt: skip
@pytest.mark.parametrize("draft_engine", ["packed", "packed-bf16", "packed-int8"])
def test_samplers_on_the_packed_engine_keep_the_target_law(kind, exact, draft_engine):
    """The mini scale's engines (`resources.linear: packed`, float32, for the target;
    `resources.draft_linear` for middle model and draft): every model computing through the
    packed kernel, the exact samplers still return the target's law, and the test still tells
    the inexact one apart."""
    from kvspec.decoding.packed import engine_of, pack_linears

    engines = {"target": "packed", "mid": draft_engine, "draft": draft_engine}
    models = {
        name: pack_linears(_sharp(seed, scale, double=False), engines[name])
        for name, seed, scale in (("target", 3, 8.0), ("mid", 4, 6.0), ("draft", 5, 6.0))
    }
    assert {n: engine_of(m) for n, m in models.items()} == engines
    settings = Settings(3, temperature=TEMPERATURE, top_p=TOP_P, k=2, k_d=2, k_i=2)
    counts = _draw(make_sampler(kind, models, settings), 2000)
    p = _pvalue(counts, _law3(models["target"]))
    assert (p > 1e-3) if exact else (p < 1e-6), p
