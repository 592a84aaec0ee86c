"""The latent-KV model: cached decoding, cache size, padding, save/load and the LM interface."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

from kvspec.models.modeling_mla import MLAConfig, MLAForCausalLM

RANKS_K, RANKS_V = [5, 32, 11], [17, 3, 32]  # mixed, including full rank g_h·d_h = 32


def _config(arch: str = "llama", **overrides) -> MLAConfig:
    fields = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        initializer_range=0.15,
        base_architecture=arch,
        kv_rank_k=RANKS_K,
        kv_rank_v=RANKS_V,
    )
    return MLAConfig(**(fields | overrides))


def _model(arch: str = "llama", seed: int = 0, **overrides) -> MLAForCausalLM:
    torch.manual_seed(seed)
    model = MLAForCausalLM(_config(arch, **overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return model.eval()


def _ids(seed: int, batch: int = 2, length: int = 6) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def _greedy(model, ids, **kwargs) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0, **kwargs)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_cached_generation_equals_uncached(arch):
    model, ids = _model(arch), _ids(0)
    cached = _greedy(model, ids, use_cache=True)
    uncached = _greedy(model, ids, use_cache=False)
    assert cached.shape == (2, 16)
    assert torch.equal(cached, uncached)
    assert len(set(cached[0, 6:].tolist())) > 1  # a non-degenerate continuation


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cache_holds_only_latents(dtype):
    model, ids = _model("qwen3").to(dtype), _ids(1, batch=3, length=5)
    out = model.generate(
        ids, max_new_tokens=7, do_sample=False, pad_token_id=0, return_dict_in_generate=True
    )
    cache = out.past_key_values
    assert isinstance(cache, DynamicCache)
    length = cache.get_seq_length()
    assert length == 5 + 7 - 1  # the last generated token is never fed back
    measured = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    per_element = torch.finfo(dtype).bits // 8
    expected = 3 * sum(k + v for k, v in zip(RANKS_K, RANKS_V, strict=True)) * length * per_element
    assert measured == expected
    assert [tuple(layer.keys.shape) for layer in cache.layers] == [
        (3, 1, length, r) for r in RANKS_K
    ]


def test_prefill_then_step_equals_full_forward():
    model, ids = _model("qwen3"), _ids(2, length=9)
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = DynamicCache(config=model.config)
        first = model(ids[:, :6], past_key_values=cache, use_cache=True).logits
        second = model(ids[:, 6:], past_key_values=cache, use_cache=True).logits
    torch.testing.assert_close(torch.cat([first, second], 1), full, atol=1e-5, rtol=1e-5)


def test_cache_crop_then_continue():
    model, ids = _model("llama"), _ids(3, length=8)
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = DynamicCache(config=model.config)
        model(ids, past_key_values=cache, use_cache=True)
        cache.crop(-3)  # drop the last three positions, as speculative decoding does
        tail = model(ids[:, 5:], past_key_values=cache, use_cache=True).logits
    torch.testing.assert_close(tail, full[:, 5:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_left_padded_batch_matches_single_sequences(arch):
    model = _model(arch)
    short, long = _ids(4, batch=1, length=4), _ids(5, batch=1, length=7)
    batch = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = torch.ones_like(batch)
    mask[0, :3] = 0
    joint = _greedy(model, batch, attention_mask=mask)
    assert torch.equal(joint[0, 3:], _greedy(model, short)[0])
    assert torch.equal(joint[1], _greedy(model, long)[0])


def test_right_padding_does_not_change_valid_logits():
    model, ids = _model("llama"), _ids(6, batch=1, length=5)
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    with torch.no_grad():
        alone = model(ids).logits
        both = model(torch.cat([padded, padded]), attention_mask=torch.cat([mask, mask])).logits
    torch.testing.assert_close(both[:, :5], alone.expand(2, -1, -1), atol=1e-5, rtol=1e-5)
    assert torch.isfinite(both).all()


def test_labels_give_shifted_cross_entropy():
    model, ids = _model("llama"), _ids(7)
    out = model(ids, labels=ids)
    manual = F.cross_entropy(out.logits[:, :-1].reshape(-1, 128).float(), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, manual)
    out.loss.backward()  # trainable end to end (healing)
    assert model.model.layers[0].self_attn.k_a.weight.grad is not None


def test_logits_to_keep():
    model, ids = _model("qwen3"), _ids(8)
    with torch.no_grad():
        full = model(ids).logits
        last = model(ids, logits_to_keep=1).logits
    assert last.shape == (2, 1, 128)
    torch.testing.assert_close(last, full[:, -1:])


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_save_and_auto_load_round_trip(tmp_path, arch):
    model, ids = _model(arch, tie_word_embeddings=(arch == "qwen3")), _ids(9)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "kvspec_mla" and config["kv_rank_k"] == RANKS_K
    assert config["auto_map"]["AutoModelForCausalLM"].endswith("MLAForCausalLM")
    assert isinstance(AutoConfig.from_pretrained(tmp_path), MLAConfig)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, MLAForCausalLM)
    assert loaded.model.layers[1].self_attn.k_a.out_features == RANKS_K[1]
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_config_validation():
    with pytest.raises(ValueError, match="kv_rank_k needs 3"):
        _config(kv_rank_k=[4, 4])
    with pytest.raises(ValueError, match="kv_rank_v needs 3"):
        _config(kv_rank_v=[4, 0, 4])
    with pytest.raises(ValueError, match="base_architecture"):
        _config(base_architecture="mistral")
    default = MLAConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2
    )
    assert default.kv_rank_k == default.kv_rank_v == [32, 32]  # full rank unless told otherwise


def test_qwen3_has_qk_norm_and_llama_not():
    qwen, llama = _model("qwen3"), _model("llama")
    assert hasattr(qwen.model.layers[0].self_attn, "k_norm")
    assert not hasattr(llama.model.layers[0].self_attn, "k_norm")


def test_mask_length_mismatch_raises():
    model, ids = _model("llama"), _ids(10)
    with pytest.raises(ValueError, match="attention_mask covers"):
        model(ids, attention_mask=torch.ones(2, 3, dtype=torch.long))
