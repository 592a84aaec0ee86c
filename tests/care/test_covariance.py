"""Calibration statistics: running moments, hooks on k_proj inputs, safetensors round trip."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from kvspec.care.covariance import (
    CovarianceStats,
    RunningMoments,
    collect_covariances,
    decoder_layers,
    load_stats,
    save_stats,
)

TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    initializer_range=0.1,
)


def _model(arch: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**TINY))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**TINY))
    with torch.no_grad():  # non-trivial norm gains so a pre-norm capture would be caught
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn_like(p))
    return model.eval()


def _ids(seed: int, batch: int = 6, length: int = 10) -> torch.Tensor:
    return torch.randint(
        0, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed)
    )


def test_running_moments_chunked_equals_direct():
    x = torch.randn(3, 50, 8, dtype=torch.float64)
    acc = RunningMoments(8)
    for chunk in (x[:1], x[1:2, :20], x[1:2, 20:], x[2:]):
        acc.update(chunk)
    rows = x.reshape(-1, 8)
    assert acc.count == 150
    torch.testing.assert_close(acc.covariance(), rows.T @ rows / 150, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(acc.mean_abs(), rows.abs().mean(0), atol=1e-12, rtol=1e-12)
    assert acc.xtx.dtype == torch.float64


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_several_batches_equal_one_big_batch(arch):
    model, ids = _model(arch), _ids(0)
    split = collect_covariances(model, [ids[:2], ids[2:3], ids[3:]], progress=False)
    whole = collect_covariances(model, [ids], progress=False)
    assert split.count == whole.count == ids.numel()
    assert split.num_layers == TINY["num_hidden_layers"]
    for a, b in zip(split.cov + split.mean_abs, whole.cov + whole.mean_abs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_captures_normed_attention_input():
    model, ids = _model("llama"), _ids(1, batch=2)
    stats = collect_covariances(model, [ids], progress=False)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states  # input of each layer
    for i, layer in enumerate(model.model.layers):
        x = layer.input_layernorm(hidden[i]).double().reshape(-1, TINY["hidden_size"])  # (N, d)
        torch.testing.assert_close(stats.cov[i], x.T @ x / x.shape[0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(stats.mean_abs[i], x.abs().mean(0), atol=1e-6, rtol=1e-5)
    # each layer sees a different input, so a single shared hook would be caught
    assert not torch.allclose(stats.cov[0], stats.cov[1])


def test_hooks_removed_and_mode_restored():
    model = _model("qwen3").train()
    collect_covariances(model, [_ids(2, batch=1)], progress=False)
    assert model.training
    assert all(not layer.self_attn.k_proj._forward_pre_hooks for layer in model.model.layers)

    def broken():
        yield _ids(3, batch=1)
        raise RuntimeError("data loader died")

    with pytest.raises(RuntimeError, match="died"):
        collect_covariances(model, broken(), progress=False)
    assert all(not layer.self_attn.k_proj._forward_pre_hooks for layer in model.model.layers)


def test_save_load_round_trip(tmp_path):
    stats = collect_covariances(_model("llama"), [_ids(4)], progress=False)
    path = tmp_path / "sub" / "stats.safetensors"
    save_stats(stats, path)
    loaded = load_stats(path)
    assert loaded.count == stats.count and loaded.num_layers == stats.num_layers
    for a, b in zip(loaded.cov + loaded.mean_abs, stats.cov + stats.mean_abs, strict=True):
        assert a.dtype == torch.float64 and torch.equal(a, b)
    assert [p.name for p in path.parent.iterdir()] == ["stats.safetensors"]  # no temp leftovers


def test_bad_inputs_raise(tmp_path):
    with pytest.raises(ValueError, match="not a Llama/Qwen3-style model"):
        decoder_layers(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no calibration tokens"):
        collect_covariances(_model("llama"), [], progress=False)
    bogus = tmp_path / "bogus.safetensors"
    save_file({"layer.0.cov": torch.eye(2)}, str(bogus))
    with pytest.raises(ValueError, match="not a covariance-statistics file"):
        load_stats(bogus)


def test_stats_dataclass_layers():
    stats = CovarianceStats(cov=[torch.eye(2)] * 3, mean_abs=[torch.ones(2)] * 3, count=5)
    assert stats.num_layers == 3
