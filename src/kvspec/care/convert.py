"""Convert a HF Llama/Qwen3/Gemma3 causal LM into the latent-KV `MLAForCausalLM`.

Every layer's k_proj and v_proj is replaced by factors from `factorize` (k_a = Aᵀ, k_b = Bᵀ);
every other weight is copied unchanged. Matrices are ordered [K_0, V_0, K_1, V_1, ...]
wherever a flat list is used (spectra for the rank allocator).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers.initialization import no_init_weights

from kvspec.care.covariance import CovarianceStats, decoder_layers
from kvspec.care.factorize import METHODS, Factors, factorize, weighted_spectrum
from kvspec.models.modeling_mla import MLAConfig, MLAForCausalLM

SOURCE_TYPES = ("llama", "qwen3", "gemma3_text")


def max_rank(config: Any) -> int:
    """Full K (or V) width g_h·d_h: the largest useful latent rank and the GQA cache parity."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_key_value_heads * head_dim


def _check_source(config: Any) -> None:
    if config.model_type not in SOURCE_TYPES:
        raise ValueError(
            f"can only convert {', '.join(SOURCE_TYPES)} models, got model_type "
            f"{config.model_type!r}"
        )
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError("bidirectional (non-causal) attention is not supported by the MLA model")


def mla_config_from(config: Any, ranks_k: list[int], ranks_v: list[int]) -> MLAConfig:
    """MLAConfig holding (a copy of) the source Llama/Qwen3/Gemma3 config, with the given
    per-layer latent ranks."""
    _check_source(config)
    n, limit = config.num_hidden_layers, max_rank(config)
    for name, ranks in (("ranks_k", ranks_k), ("ranks_v", ranks_v)):
        if len(ranks) != n or not all(isinstance(r, int) and 1 <= r <= limit for r in ranks):
            raise ValueError(f"{name} needs {n} ints in [1, {limit}], got {ranks}")
    return MLAConfig(
        base_config=config.to_dict(),
        kv_rank_k=list(ranks_k),
        kv_rank_v=list(ranks_v),
        architectures=["MLAForCausalLM"],
    )


def _projections(model: nn.Module) -> list[nn.Linear]:
    """[k_proj_0, v_proj_0, k_proj_1, ...]; asserts they carry no bias (true for Llama, Qwen3
    and Gemma3)."""
    projs = [
        p
        for layer in decoder_layers(model)
        for p in (layer.self_attn.k_proj, layer.self_attn.v_proj)
    ]
    if any(p.bias is not None for p in projs):
        raise ValueError("k_proj/v_proj with bias are not supported (factors carry no bias)")
    return projs


def _stats_for(method: str, stats: CovarianceStats | None, layer: int) -> dict[str, Tensor | None]:
    """The calibration statistics `method` needs for `layer`."""
    if method not in METHODS:
        raise ValueError(f"unknown factorization method {method!r}; expected one of {METHODS}")
    if method == "svd":
        return {}
    if stats is None:
        raise ValueError(f"method {method!r} needs calibration statistics (stats=None given)")
    if layer >= stats.num_layers:
        raise ValueError(f"stats cover {stats.num_layers} layers, model has more")
    return {"cov": stats.cov[layer]} if method == "care" else {"mean_abs": stats.mean_abs[layer]}


def layer_spectra(
    model: nn.Module, method: str, stats: CovarianceStats | None = None, **opts: Any
) -> list[Tensor]:
    """Singular values of each weighted K/V matrix, ordered [K_0, V_0, K_1, V_1, ...]."""
    projs = _projections(model)
    return [
        weighted_spectrum(p.weight, method, **_stats_for(method, stats, i // 2), **opts)
        for i, p in enumerate(projs)
    ]


def split_kv(ranks: list[int]) -> tuple[list[int], list[int]]:
    """Split an interleaved [K_0, V_0, K_1, V_1, ...] list into (ranks_k, ranks_v)."""
    if len(ranks) % 2:
        raise ValueError(f"expected an even-length interleaved K/V list, got {len(ranks)} entries")
    return list(ranks[0::2]), list(ranks[1::2])


def _latent_weights(prefix: str, factors: Factors) -> dict[str, Tensor]:
    """State-dict entries for one factorized projection: a: (r, d), b: (out, r)."""
    return {
        f"{prefix}_a.weight": factors.a.T.contiguous(),
        f"{prefix}_b.weight": factors.b.T.contiguous(),
    }


def truncate(factors: Factors, rank: int, drop: list[int] | None = None) -> Factors:
    """The first `rank` components of `factors`, minus the component indices in `drop`.

    Components are ordered by singular value, so plain truncation keeps the top-`rank` ones;
    `drop` removes chosen components (Figure 3.1c's singular-value groups).
    """
    full = factors.a.shape[1]
    if not 1 <= rank <= full:
        raise ValueError(f"rank {rank} outside [1, {full}] for these factors")
    keep = [i for i in range(rank) if i not in set(drop or [])]
    if not keep:
        raise ValueError(f"dropping {drop} leaves no component of rank {rank}")
    idx = torch.tensor(keep, dtype=torch.long)
    return Factors(a=factors.a[:, idx], b=factors.b[idx], spectrum=factors.spectrum)


@torch.no_grad()
def mla_from_factors(
    model: nn.Module,
    factors: list[Factors],
    ranks_k: list[int],
    ranks_v: list[int],
    drop_k: list[list[int]] | None = None,
    drop_v: list[list[int]] | None = None,
) -> MLAForCausalLM:
    """Latent-KV copy of `model` from precomputed factors [K_0, V_0, K_1, ...] of rank >= r.

    Each matrix keeps its leading `ranks_*[layer]` components minus `drop_*[layer]`; the
    latent width of the result is the number of components kept.
    """
    n = model.config.num_hidden_layers
    drop_k, drop_v = drop_k or [[] for _ in range(n)], drop_v or [[] for _ in range(n)]
    if len(factors) != 2 * n or len(drop_k) != n or len(drop_v) != n:
        raise ValueError(f"need {2 * n} factors and {n} drop lists, got {len(factors)}")
    kept = [
        truncate(f, (ranks_k, ranks_v)[i % 2][i // 2], (drop_k, drop_v)[i % 2][i // 2])
        for i, f in enumerate(factors)
    ]
    widths_k, widths_v = split_kv([f.a.shape[1] for f in kept])
    config = mla_config_from(model.config, widths_k, widths_v)
    _projections(model)  # refuses biased k/v projections
    state = {
        k: v for k, v in model.state_dict().items() if ".k_proj." not in k and ".v_proj." not in k
    }
    for i, f in enumerate(kept):
        layer, kind = divmod(i, 2)
        state.update(_latent_weights(f"model.layers.{layer}.self_attn.{'kv'[kind]}", f))
    param = next(model.parameters())
    with no_init_weights():  # every parameter is loaded from `state` below
        mla = MLAForCausalLM(config)
    mla.tie_weights()  # skipped with the initialisation
    mla = mla.to(dtype=param.dtype, device=param.device)
    mla.load_state_dict(state, strict=True)
    return mla.eval()


def full_factors(
    model: nn.Module, method: str, stats: CovarianceStats | None = None, **opts: Any
) -> list[Factors]:
    """Full-rank factors of every K/V matrix [K_0, V_0, K_1, ...]; truncate them for any rank.

    Exact SVD factors truncated to r equal the rank-r factorization, so one decomposition per
    (model, method, calibration) serves every rank and allocation.
    """
    return [
        factorize(
            p.weight, min(p.weight.shape), method, **_stats_for(method, stats, i // 2), **opts
        )
        for i, p in enumerate(_projections(model))
    ]


@torch.no_grad()
def convert_to_mla(
    model: nn.Module,
    method: str,
    ranks_k: list[int],
    ranks_v: list[int],
    stats: CovarianceStats | None = None,
    **opts: Any,
) -> MLAForCausalLM:
    """Latent-KV copy of `model` with k/v_proj factorized by `method` at the given ranks.

    `opts` go to `factorize` (alpha, lam_frac, asvd_alpha, randomized, seed). The result has the
    source's dtype and device and is in eval mode.
    """
    mla_config_from(model.config, ranks_k, ranks_v)  # validates the ranks first
    projs = _projections(model)
    factors = [
        factorize(
            p.weight,
            (ranks_k if i % 2 == 0 else ranks_v)[i // 2],
            method,
            **_stats_for(method, stats, i // 2),
            **opts,
        )
        for i, p in enumerate(projs)
    ]
    return mla_from_factors(model, factors, ranks_k, ranks_v)
