"""KV-cache formulas against the bytes of real caches."""

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from kvspec.lecture import kv_cache as kv
from tests.tiny import tiny_llama


def test_formulas_on_the_lectures_deepseek_example() -> None:
    s = kv.Shape(**kv.DOCUMENT_MODELS["DeepSeek-V3 (lecture, MLA)"])
    assert s.heads * s.head_dim == 16384 and s.latent + s.rope == 576
    assert kv.mla(s) == 61 * 576
    assert kv.mha(s) / kv.mla(s) == pytest.approx(2 * 16384 / 576)


def test_gqa_mqa_cla_relations() -> None:
    s = kv.Shape(layers=30, heads=9, kv_heads=3, head_dim=64)
    assert kv.mha(s) == 3 * kv.gqa(s) == 9 * kv.mqa(s)
    assert kv.cla(s) == kv.gqa(s) // 2
    assert kv.cla(kv.Shape(3, 4, 2, 8)) == 2 * 2 * 2 * 8  # ceil(3 / 2) caches


def test_gqa_formula_equals_a_real_cache() -> None:
    model = tiny_llama(0, double=False)
    shape = kv.Shape.of(model.config)
    assert kv.measured_bytes_per_token(model, 20, seed=0) == kv.gqa(shape) * 4


def test_mha_twin_has_the_same_outputs_and_the_mha_cache() -> None:
    model = tiny_llama(1)
    twin = kv.mha_twin(model)
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(twin(ids).logits, model(ids).logits)
    shape = kv.Shape.of(model.config)
    assert kv.measured_bytes_per_token(twin, 10, seed=0) == kv.mha(shape) * 8


def test_sliding_window_formula_equals_gemma3_cache() -> None:
    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1,
                           head_dim=16, sliding_window=8, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg).eval()
    shape = kv.Shape.of(model.config)
    assert shape.window == 8 and shape.local_layers == 5
    for context in (6, 40):
        got = kv.measured_bytes_per_token(model, context, seed=0)
        assert got == pytest.approx(kv.windowed(shape, context) * 4, rel=0.15), context
    assert kv.windowed(shape, 40) < kv.gqa(shape)
