"""GQA → latent-KV conversion: exact at full rank, allocation end to end, input validation."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from kvspec.care.allocate import waterfill_ranks
from kvspec.care.convert import (
    convert_to_mla,
    layer_spectra,
    max_rank,
    mla_config_from,
    split_kv,
)
from kvspec.care.covariance import collect_covariances
from kvspec.care.factorize import METHODS, factorize
from kvspec.models.modeling_mla import MLAForCausalLM

TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    initializer_range=0.15,
)
FULL = 2 * 16  # g_h · d_h
ARCHS = ["llama", "qwen3"]


def _source(arch: str, seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**(TINY | overrides)))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**(TINY | overrides)))
    with torch.no_grad():  # random norm gains so q_norm/k_norm placement matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return model.eval()


def _ids(seed: int, batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=ARCHS)
def calibrated(request) -> tuple[torch.nn.Module, object]:
    model = _source(request.param)
    return model, collect_covariances(model, [_ids(100, batch=4, length=16)], progress=False)


@pytest.mark.parametrize("method", METHODS)
def test_full_rank_reproduces_logits(calibrated, method):
    source, stats = calibrated
    mla = convert_to_mla(source, method, [FULL, FULL], [FULL, FULL], stats=stats)
    ids = _ids(1)
    with torch.no_grad():
        expected, got = source(ids).logits, mla(ids).logits
    assert expected.abs().max() > 0.5  # the test model is not trivially flat
    assert (got - expected).abs().max() < 1e-4


@pytest.mark.parametrize("randomized", [False, True])
def test_full_rank_generation_with_padding_matches_source(calibrated, randomized):
    source, stats = calibrated
    mla = convert_to_mla(source, "care", [FULL] * 2, [FULL] * 2, stats=stats, randomized=randomized)
    ids = _ids(2, length=6)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding, as in batched lm-eval generation
    kwargs = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(mla.generate(ids, **kwargs), source.generate(ids, **kwargs))


def test_low_rank_weights_are_the_factors(calibrated):
    source, stats = calibrated
    ranks_k, ranks_v = [3, 20], [9, 1]
    mla = convert_to_mla(source, "care", ranks_k, ranks_v, stats=stats, alpha=0.02)
    for i, layer in enumerate(mla.model.layers):
        src = source.model.layers[i].self_attn
        f = factorize(src.v_proj.weight, ranks_v[i], "care", cov=stats.cov[i], alpha=0.02)
        assert torch.equal(layer.self_attn.v_a.weight, f.a.T)
        assert torch.equal(layer.self_attn.v_b.weight, f.b.T)
        assert layer.self_attn.k_a.out_features == ranks_k[i]
        assert torch.equal(layer.self_attn.q_proj.weight, src.q_proj.weight)
        assert torch.equal(layer.mlp.down_proj.weight, source.model.layers[i].mlp.down_proj.weight)
    assert mla.config.kv_rank_k == ranks_k and mla.config.kv_rank_v == ranks_v
    assert mla.config.base_architecture == source.config.model_type


def test_spectra_allocation_and_conversion_end_to_end(calibrated):
    source, stats = calibrated
    spectra = layer_spectra(source, "care", stats)
    assert len(spectra) == 4 and all(s.shape == (FULL,) for s in spectra)
    k0 = factorize(source.model.layers[0].self_attn.k_proj.weight, 4, "care", cov=stats.cov[0])
    torch.testing.assert_close(spectra[0], k0.spectrum)
    ranks_k, ranks_v = split_kv(waterfill_ranks(spectra, 4 * 12, max_rank(source.config)))
    assert sum(ranks_k) + sum(ranks_v) == 48
    mla = convert_to_mla(source, "care", ranks_k, ranks_v, stats=stats)
    greedy = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    out = mla.generate(_ids(3, batch=1, length=5), **greedy)
    cache_elems = sum(
        layer.keys.numel() + layer.values.numel() for layer in out.past_key_values.layers
    )
    assert cache_elems == 48 * out.past_key_values.get_seq_length()


@pytest.mark.parametrize("arch", ARCHS)
def test_dtype_and_tied_embeddings_preserved(arch):
    source = _source(arch, tie_word_embeddings=True).to(torch.bfloat16)
    mla = convert_to_mla(source, "svd", [8, 8], [8, 8])
    assert isinstance(mla, MLAForCausalLM)
    assert all(p.dtype == torch.bfloat16 for p in mla.parameters())
    assert mla.lm_head.weight.data_ptr() == mla.model.embed_tokens.weight.data_ptr()


def test_max_rank_and_split():
    assert max_rank(LlamaConfig(**TINY)) == FULL
    assert max_rank(LlamaConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2)) == 16
    assert split_kv([1, 2, 3, 4]) == ([1, 3], [2, 4])
    with pytest.raises(ValueError, match="even-length"):
        split_kv([1, 2, 3])


def test_bad_inputs_raise(calibrated):
    source, stats = calibrated
    with pytest.raises(ValueError, match="ranks_k needs 2"):
        convert_to_mla(source, "svd", [8], [8, 8])
    with pytest.raises(ValueError, match=r"ranks_v needs 2 ints in \[1, 32\]"):
        convert_to_mla(source, "svd", [8, 8], [8, 33])
    with pytest.raises(ValueError, match="needs calibration statistics"):
        convert_to_mla(source, "care", [8, 8], [8, 8])
    with pytest.raises(ValueError, match="needs calibration statistics"):
        layer_spectra(source, "asvd")
    with pytest.raises(ValueError, match="unknown factorization method"):
        convert_to_mla(source, "pca", [8, 8], [8, 8], stats=stats)
    with pytest.raises(ValueError, match="with bias"):
        convert_to_mla(_source("llama", attention_bias=True), "svd", [8, 8], [8, 8])
    with pytest.raises(ValueError, match="sliding-window"):
        mla_config_from(
            Qwen3Config(**TINY, use_sliding_window=True, max_window_layers=1), [8, 8], [8, 8]
        )
    with pytest.raises(ValueError, match="not a Llama/Qwen3-style model"):
        layer_spectra(torch.nn.Linear(4, 4), "svd")
