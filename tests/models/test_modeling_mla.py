"""The latent-KV model: cached decoding, cache size, padding, save/load and the LM interface."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, Gemma3TextConfig

from kvspec.models.modeling_mla import MLAAttention, MLAConfig, MLAForCausalLM, rope_positions

RANKS_K, RANKS_V = [5, 32, 11], [17, 3, 32]  # mixed, including full rank g_h·d_h = 32
ARCHS = ["llama", "qwen3", "gemma3_text"]
# Gemma3 as flat fields: window 4 (shorter than the sequences), QK-norm, query_pre_attn_scalar;
# untied, as a random tied Gemma3 tends to repeat one token
GEMMA3 = dict(sliding_window=4, query_pre_attn_scalar=24, tie_word_embeddings=False,
              layer_types=["sliding_attention", "full_attention", "sliding_attention"])  # fmt: skip


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
    return MLAConfig(**(fields | (GEMMA3 if arch == "gemma3_text" else {}) | overrides))


def _model(arch: str = "llama", seed: int = 0, **overrides) -> MLAForCausalLM:
    torch.manual_seed(seed)
    model = MLAForCausalLM(_config(arch, **overrides))
    unit = 0.0 if arch == "gemma3_text" else 1.0  # Gemma's RMSNorm scales by (1 + w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(unit + 0.3 * torch.randn_like(p))
    return model.eval()


def _ids(seed: int, batch: int = 2, length: int = 6) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def _greedy(model, ids, **kwargs) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0, **kwargs)


@pytest.mark.parametrize("arch", ARCHS)
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


@pytest.mark.parametrize("arch", ["qwen3", "gemma3_text"])
def test_prefill_then_step_equals_full_forward(arch):
    model, ids = _model(arch), _ids(2, length=9)
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


@pytest.mark.parametrize("arch", ARCHS)
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


@pytest.mark.parametrize("arch", ARCHS)
def test_save_and_auto_load_round_trip(tmp_path, arch):
    model, ids = _model(arch, tie_word_embeddings=(arch != "llama")), _ids(9)
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


def test_qwen3_and_gemma3_have_qk_norm_and_llama_not():
    qwen, llama, gemma = _model("qwen3"), _model("llama"), _model("gemma3_text")
    assert hasattr(qwen.model.layers[0].self_attn, "k_norm")
    assert type(gemma.model.layers[0].self_attn.k_norm).__name__ == "Gemma3RMSNorm"
    assert not hasattr(llama.model.layers[0].self_attn, "k_norm")


def test_source_decoder_is_kept_and_only_attention_swapped():
    model = _model("gemma3_text")
    assert type(model.model).__name__ == "Gemma3TextModel"
    layer = model.model.layers[0]
    assert type(layer).__name__ == "Gemma3DecoderLayer"
    assert hasattr(layer, "pre_feedforward_layernorm")  # Gemma's four norms per layer
    attn = layer.self_attn
    assert isinstance(attn, MLAAttention) and not hasattr(attn, "k_proj")
    assert attn.scaling == 24**-0.5 and attn.sliding_window == 4
    assert attn.rope_key == "sliding_attention"  # the local RoPE base
    assert model.model.layers[1].self_attn.sliding_window is None
    names = {n for n, _ in model.named_parameters()}
    prefix = "model.layers.2.self_attn"
    assert {f"{prefix}.k_a.weight", f"{prefix}.q_norm.weight"} <= names


def test_config_mirrors_the_source_but_not_its_windows():
    source = Gemma3TextConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=1, head_dim=32, sliding_window=4)  # fmt: skip
    config = MLAConfig(base_config=source.to_dict(), kv_rank_k=[8, 9, 10])
    assert config.base_architecture == "gemma3_text" and config.head_dim == 32
    assert config.kv_rank_v == [32] * 3  # full rank g_h·d_h unless told otherwise
    assert isinstance(config.base_config, Gemma3TextConfig)
    assert config.base_config.layer_types[0] == "sliding_attention"
    assert not any(DynamicCache(config=config).is_sliding)  # latents of every position kept
    again = MLAConfig.from_dict(config.to_dict())
    assert again.base_config.sliding_window == 4 and again.kv_rank_k == [8, 9, 10]


def test_key_positions_extend_queries_backwards():
    queries, keys = rope_positions(torch.tensor([[7, 8], [2, 3]]), 3, 2, torch.device("cpu"))
    assert keys.tolist() == [[4, 5, 6, 7, 8], [-1, 0, 1, 2, 3]]  # row 1: left padding
    queries, keys = rope_positions(None, 2, 3, torch.device("cpu"))
    assert queries.tolist() == [[2, 3, 4]] and keys.tolist() == [[0, 1, 2, 3, 4]]


def test_mask_length_mismatch_raises():
    model, ids = _model("llama"), _ids(10)
    with pytest.raises(ValueError, match="attention_mask covers"):
        model(ids, attention_mask=torch.ones(2, 3, dtype=torch.long))


def _force_absorb(model: MLAForCausalLM, absorb: bool | None) -> MLAForCausalLM:
    for layer in model.model.layers:
        layer.self_attn.absorb_values = absorb
    return model


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_absorbed_values_give_the_same_logits(arch, implementation):
    """Attention over the value latent then v_b per head == attention over rebuilt values:
    prefill and cached steps, left padding, sliding windows (Gemma3), both attention kernels."""
    model = _model(arch)
    model.config.base_config._attn_implementation = implementation
    ids = _ids(7, length=9)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0

    rebuilds = []
    for layer in model.model.layers:
        layer.self_attn.v_b.register_forward_hook(lambda *_: rebuilds.append(1))

    def run(absorb: bool) -> torch.Tensor:
        _force_absorb(model, absorb)
        rebuilds.clear()
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            first = model(ids[:, :6], attention_mask=mask[:, :6], past_key_values=cache).logits
            steps = [
                model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=cache)
                .logits for t in range(6, 9)
            ]  # fmt: skip
        assert len(rebuilds) == (0 if absorb else 4 * 3)  # the route taken: 4 calls x 3 layers
        return torch.cat([first, *steps], 1)

    rebuilt, absorbed = run(False), run(True)
    _force_absorb(model, None)
    torch.testing.assert_close(absorbed, rebuilt, atol=1e-5, rtol=1e-5)


def test_absorbing_is_chosen_for_decoding_and_not_for_a_long_prefill():
    from kvspec.models.modeling_mla import ABSORB_MAX_QUERY

    attn = _model("llama", kv_rank_v=[32, 32, 32]).model.layers[0].self_attn
    assert attn._absorb_values(q_len=1, kv_len=512)  # one query: never rebuild 512 values
    assert not attn._absorb_values(q_len=16, kv_len=16)  # r_V = 32 > d_h = 16 per head
    narrow = _model("llama").model.layers[1].self_attn  # r_V = 3 < d_h: absorbing is cheaper
    assert narrow._absorb_values(q_len=ABSORB_MAX_QUERY, kv_len=512)
    # ... but a longer step rebuilds, so that SDPA's fused kernels apply (equal widths)
    assert not narrow._absorb_values(q_len=ABSORB_MAX_QUERY + 1, kv_len=512)
