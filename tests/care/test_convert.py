"""GQA → latent-KV conversion: exact at full rank, allocation end to end, input validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)

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
WINDOW = 4  # Gemma3's sliding window here: shorter than every test sequence
# Llama-3.1 frequency-dependent RoPE scaling; original context 8 so that it changes most bands
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}  # fmt: skip
# Gemma3: QK-norm, query_pre_attn_scalar ≠ head_dim, a sliding layer with its own RoPE base
GEMMA3 = dict(
    query_pre_attn_scalar=24,
    sliding_window=WINDOW,
    layer_types=["sliding_attention", "full_attention"],
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},  # local base
    },
)
SOURCES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "llama3": (LlamaConfig, LlamaForCausalLM, {"rope_parameters": LLAMA3_ROPE}),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {}),
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, GEMMA3),
}
ARCHS = list(SOURCES)


def _source(arch: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A seeded tiny random HF model of `arch` (a key of SOURCES) in eval mode."""
    config_class, model_class, fields = SOURCES[arch]
    torch.manual_seed(seed)
    model = model_class(config_class(**(TINY | fields | overrides)))
    unit = 0.0 if arch == "gemma3" else 1.0  # Gemma's RMSNorm scales by (1 + w)
    with torch.no_grad():  # random norm gains so q_norm/k_norm placement matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(unit + 0.3 * torch.randn_like(p))
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
    with pytest.raises(ValueError, match="bidirectional"):
        bidirectional = Gemma3TextConfig(**TINY, use_bidirectional_attention=True)
        mla_config_from(bidirectional, [8, 8], [8, 8])
    with pytest.raises(ValueError, match="can only convert"):
        mla_config_from(MistralConfig(**TINY), [8, 8], [8, 8])
    with pytest.raises(ValueError, match="not a Llama/Qwen3-style model"):
        layer_spectra(torch.nn.Linear(4, 4), "svd")


@pytest.mark.parametrize("arch", ["llama3", "gemma3"])
def test_eager_attention_also_exact(arch):
    source = _source(arch)
    source.set_attn_implementation("eager")
    mla = convert_to_mla(source, "svd", [FULL] * 2, [FULL] * 2)
    mla.set_attn_implementation("eager")  # reaches the source config inside the MLA model
    assert mla.model.layers[0].self_attn.config._attn_implementation == "eager"
    ids = _ids(4, length=10)
    with torch.no_grad():
        assert (mla(ids).logits - source(ids).logits).abs().max() < 1e-4


def test_gemma3_sliding_layers_see_only_their_window():
    """All-sliding Gemma3: the last token depends on the last L·(W-1)+1 tokens only, in the
    source and in the converted model, with and without the latent cache."""
    source = _source("gemma3", layer_types=["sliding_attention"] * 2)
    mla = convert_to_mla(source, "svd", [FULL] * 2, [FULL] * 2)
    ids = _ids(5, batch=1, length=14)
    reach = 2 * (WINDOW - 1) + 1
    far, near = ids.clone(), ids.clone()
    far[0, -reach - 1] = (far[0, -reach - 1] + 1) % 128  # just out of reach
    near[0, -reach] = (near[0, -reach] + 1) % 128  # just in reach
    with torch.no_grad():
        for model in (source, mla):
            last = [model(x).logits[0, -1] for x in (ids, far, near)]
            assert (last[0] - last[1]).abs().max() < 1e-5
            assert (last[0] - last[2]).abs().max() > 1e-3
        cache = DynamicCache(config=mla.config)
        mla(ids[:, :9], past_key_values=cache)  # prefill past the window, then step by step
        steps = [mla(ids[:, i : i + 1], past_key_values=cache).logits for i in range(9, 14)]
        assert cache.get_seq_length() == 14  # every latent kept: the masks apply the window
        full = mla(ids).logits[:, 9:]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["gemma3", "llama3"])
def test_cached_greedy_generation_equals_source_and_uncached(arch):
    source = _source(arch, tie_word_embeddings=False)  # random tied Gemma3 repeats one token
    mla = convert_to_mla(source, "svd", [FULL] * 2, [FULL] * 2)
    ids = _ids(6, batch=3, length=7)
    mask = torch.ones_like(ids)
    mask[0, :3], mask[1, :1] = 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    expected = source.generate(ids, **kw)
    assert len(set(expected[2, 7:].tolist())) > 2  # a non-degenerate continuation
    assert torch.equal(mla.generate(ids, **kw), expected)
    assert torch.equal(mla.generate(ids, use_cache=False, **kw), expected)


def test_sliding_cache_is_refused():
    source = _source("gemma3")
    mla = convert_to_mla(source, "svd", [8, 8], [8, 8])
    with pytest.raises(ValueError, match="full-length DynamicCache"):
        mla(_ids(7), past_key_values=DynamicCache(config=source.config))


def _weights_bytes(model_dir: Path) -> int:
    return sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_saved_against_base_stores_only_the_factors(tmp_path, arch):
    source = _source(arch, vocab_size=4096, tie_word_embeddings=True)
    base = tmp_path / "models" / "base"
    source.save_pretrained(base)
    mla = convert_to_mla(source, "svd", [FULL, 8], [5, FULL])
    out = tmp_path / "convert" / "svd" / "r8"
    mla.save_pretrained(out, base_model_dir=base)
    reference = json.loads((out / "config.json").read_text())["base_model"]
    assert reference["path"] == "../../../models/base"
    with safe_open(out / "model.safetensors", "pt") as f:
        stored = set(f.keys())
    assert stored == {f"model.layers.{i}.self_attn.{m}_{p}.weight"
                      for i in range(2) for m in "kv" for p in "ab"}  # fmt: skip
    mla.save_pretrained(tmp_path / "whole")
    assert 20 * _weights_bytes(out) < _weights_bytes(base)
    assert _weights_bytes(tmp_path / "whole") > 0.9 * _weights_bytes(base)  # saved whole
    ids = _ids(8)
    for root in (tmp_path, tmp_path / "moved"):  # base and model moved together still load
        if root != tmp_path:
            shutil.copytree(tmp_path / "models", root / "models")
            shutil.copytree(tmp_path / "convert", root / "convert")
        loaded = AutoModelForCausalLM.from_pretrained(root / "convert" / "svd" / "r8").eval()
        assert isinstance(loaded, MLAForCausalLM) and loaded.config.kv_rank_v == [5, FULL]
        assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
        with torch.no_grad():
            assert torch.equal(loaded(ids).logits, mla(ids).logits)


def test_changed_or_missing_base_is_refused(tmp_path):
    source = _source("gemma3")
    base, out = tmp_path / "base", tmp_path / "mla"
    source.save_pretrained(base)
    convert_to_mla(source, "svd", [8, 8], [8, 8]).save_pretrained(out, base_model_dir=base)
    with torch.no_grad():
        source.model.norm.weight[0] += 1.0
    source.save_pretrained(base)  # same names and sizes, other values
    with pytest.raises(ValueError, match="not the one"):
        AutoModelForCausalLM.from_pretrained(out)
    shutil.rmtree(base)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        AutoModelForCausalLM.from_pretrained(out)


def test_resaving_without_base_writes_everything(tmp_path):
    source = _source("qwen3")
    source.save_pretrained(tmp_path / "base")
    mla = convert_to_mla(source, "svd", [8, 8], [8, 8])
    mla.save_pretrained(tmp_path / "mla", base_model_dir=tmp_path / "base")
    healed = AutoModelForCausalLM.from_pretrained(tmp_path / "mla")
    healed.save_pretrained(tmp_path / "healed")  # e.g. after healing: no base reference
    assert json.loads((tmp_path / "healed" / "config.json").read_text())["base_model"] is None
    shutil.rmtree(tmp_path / "base")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "healed")
    ids = _ids(9)
    with torch.no_grad():
        assert torch.equal(again(ids).logits, mla(ids).logits)


def test_lm_eval_scores_full_rank_gemma3_like_the_source(tmp_path):
    from kvspec.eval.harness import TaskSpec, evaluate
    from kvspec.models.tokenizer import train_tokenizer

    text = "the cat sat on the mat . the dog ran to the park and the bird sang in a tree"
    tok = train_tokenizer([text] * 20, 128, 64)
    source = _source("gemma3", vocab_size=len(tok))
    mla = convert_to_mla(source, "svd", [FULL] * 2, [FULL] * 2)
    data = tmp_path / "text.jsonl"
    data.write_text(json.dumps({"id": "0", "text": text}) + "\n")
    spec = {"wiki": TaskSpec("word_perplexity", "kvspec_wikitext2", str(data), limit=1)}
    tasks = Path(__file__).resolve().parents[2] / "config" / "lm_eval_tasks"
    got, want = (evaluate(m, tok, spec, tasks, batch_size=2)["wiki"] for m in (mla, source))
    assert got["value"] == pytest.approx(want["value"], rel=1e-4)


def test_gemma3_calibration_sees_the_input_layernorm_output():
    model, ids = _source("gemma3"), _ids(10)
    stats = collect_covariances(model, [ids], progress=False)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states  # input of each layer
    for i, layer in enumerate(model.model.layers):
        x = layer.input_layernorm(hidden[i]).double().reshape(-1, TINY["hidden_size"])  # (N, d)
        torch.testing.assert_close(stats.cov[i], x.T @ x / x.shape[0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(stats.mean_abs[i], x.abs().mean(0), atol=1e-6, rtol=1e-5)
