"""Full MLA restoration ("100% MLA", TransMLA-style): a GQA Llama model → DeepSeek-V3 attention.

Per layer, with g KV heads of width d and the K/V input covariance C (from calibration):

1. RoRoPE. The keys of all KV heads form one g·d vector k̃. For each group of `freqfold`
   neighbouring RoPE frequencies, its g·freqfold complex components (real part at i, imaginary
   at i + d/2 of each head) are rotated by the eigenvectors of their second moment
   E[Re Reᵀ + Im Imᵀ] (from W_K C W_Kᵀ), strongest first. The same orthogonal rotation applied to
   the real and imaginary parts commutes with RoPE (exactly when freqfold = 1), and the queries
   are rotated with it, so every q·k is unchanged. The first rotated component of each group
   keeps RoPE at the group's first frequency: that is the decoupled RoPE key (d/freqfold dims),
   shared by all heads; with `rope_per_group` m > 1 the m leading components keep RoPE at the
   frequencies j·freqfold + c·freqfold/m (m·d/freqfold dims, e.g. half the head with freqfold 4
   and m = 2, TransMLA's Llama default). The other components lose RoPE (the approximation
   healing repairs).
2. Joint latent. The position-free key components and all of V are one linear map Z of x
   (K part balanced to V's RMS first, as TransMLA's BKV). Z is factored at rank r_lat:
   ``transmla``: weight-space SVD of Z (the thesis's description); ``transmla-pca``: PCA of
   the calibration outputs Z·x (TransMLA's released code); ``transmla-care``: CARE's
   covariance-weighted SVD of √C_λ·Zᵀ (C_λ: `shrinkage`; with none it equals ``transmla-pca``,
   since the SVD's right singular vectors are the eigenvectors of Z·C·Zᵀ and A = Zᵀ·U). Within
   a layer the joint factorisation is the optimal split of the latent between K and V, so
   there is nothing left for water-filling to allocate there. Across layers, r_lat (see
   `latent_rank`) is either every layer's rank or, with ``schedule="waterfill"``, the mean of
   ranks water-filled on each layer's spectrum (within `rank_bounds` of it when set); as
   DeepSeek-V3 has one `kv_lora_rank`, each latent is then zero-padded to the widest layer.
3. Layout. Query head h (KV group a): q_nope = q_h (d dims), q_rope = R[rope, a]·q_h, and the
   key for head h is R[nope, a]ᵀ·k_nope: an exact re-association of the dot product. The
   scale √((d + d_rope)/d) is folded into q_proj because DeepSeek-V3 divides by √(d + d_rope).

The cache per token and layer is kv_lora_rank + d_rope numbers; `latent_rank` chooses
kv_lora_rank so that this equals the budget 2·r of a rank-r CARE conversion.

Known departures from the original function, all repaired by healing: RoPE dropped on the
non-leading components; FreqFold's shared frequency (freqfold > 1); and DeepSeek-V3's RMSNorm
on the latent (`kv_a_layernorm`), initialised to the latent's calibration RMS so that it is the
identity on an average token. Qwen3's per-head QK-norm has no place in DeepSeek-V3 and is refused.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, PreTrainedModel

from kvspec.care.allocate import rank_limits, waterfill_ranks
from kvspec.care.factorize import SHRINKAGES, factorize, weighted_spectrum
from kvspec.care.vocabulary import RESTORE_METHODS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreSpec:
    """Settings of one restoration (the `care.heal.restore` config block plus the method)."""

    method: str  # transmla | transmla-pca | transmla-care
    kv_lora_rank: int
    freqfold: int = 1
    care_alpha: float = 0.05
    care_lambda: float = 0.01
    rope_per_group: int = 1  # RoPE components kept per group of `freqfold` frequencies
    schedule: str = "uniform"  # latent rank per layer: uniform, or waterfill (mean kv_lora_rank)
    shrinkage: str = "lambda_max"  # CARE's covariance shrinkage (kvspec.care.factorize)
    # water-filled ranks bounded to [lo·kv_lora_rank, hi·kv_lora_rank] (None: [1, widest])
    rank_bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.method not in RESTORE_METHODS:
            raise ValueError(f"restore method must be one of {sorted(RESTORE_METHODS)}")
        if self.kv_lora_rank < 1 or self.freqfold < 1:
            raise ValueError("kv_lora_rank and freqfold must be >= 1")
        if self.schedule not in ("uniform", "waterfill"):
            raise ValueError(f"schedule must be uniform or waterfill, got {self.schedule!r}")
        if self.shrinkage not in SHRINKAGES:
            raise ValueError(f"shrinkage must be one of {SHRINKAGES}, got {self.shrinkage!r}")
        if self.rank_bounds is not None and not 0 < self.rank_bounds[0] <= 1 <= self.rank_bounds[1]:
            raise ValueError(f"rank_bounds (lo, hi) need 0 < lo <= 1 <= hi, got {self.rank_bounds}")
        if self.rope_per_group < 1 or self.freqfold % self.rope_per_group:
            raise ValueError(
                f"rope_per_group {self.rope_per_group} must divide freqfold {self.freqfold}"
            )


def _shape(config: Any) -> tuple[int, int, int]:
    """(query heads H, KV heads g, head width d) of a Llama config; refuses what cannot map."""
    if config.model_type != "llama":
        raise ValueError(
            f"full MLA restoration needs a Llama model; got {config.model_type!r}"
            + (
                " (Qwen3's per-head q/k RMSNorm has no counterpart in DeepSeek-V3 attention)"
                if config.model_type == "qwen3"
                else ""
            )
        )
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("models with attention or MLP biases are not supported")
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_attention_heads, config.num_key_value_heads, d


def rope_dim(head_dim: int, freqfold: int, per_group: int = 1) -> int:
    """Width of the decoupled RoPE key: `per_group` complex components per group of `freqfold`
    frequencies (TransMLA's Llama default, half the head: freqfold 4 with 2 per group)."""
    if head_dim % (2 * freqfold):
        raise ValueError(f"freqfold {freqfold} must divide head_dim/2 = {head_dim // 2}")
    return per_group * head_dim // freqfold


def rope_per_group(head_dim: int, freqfold: int, width: int | None) -> int:
    """Components per frequency group giving a RoPE key of `width` dims (None: one)."""
    if width is None:
        return 1
    per_group, rest = divmod(width * freqfold, head_dim)
    if rest or per_group < 1 or freqfold % per_group:
        raise ValueError(
            f"a RoPE key of {width} dims needs head_dim/freqfold = {head_dim // freqfold} dims "
            f"times a divisor of freqfold {freqfold}"
        )
    return per_group


CACHE_CONVENTIONS = ("matched", "official")


def latent_rank(
    config: Any, rank: int, freqfold: int, cache: str = "matched", per_group: int = 1
) -> int:
    """kv_lora_rank for MLA rank r. ``matched``: the cache (latent + RoPE key) equals 2·r, a
    rank-r CARE model's; ``official``: kv_lora_rank = r plus the RoPE key, as the released
    TransMLA/CARE scripts pass ``--kv-lora-rank r`` (r + d_rope numbers per token and layer)."""
    if cache not in CACHE_CONVENTIONS:
        raise ValueError(f"cache convention must be one of {CACHE_CONVENTIONS}, got {cache!r}")
    _, g, d = _shape(config)
    rope = rope_dim(d, freqfold, per_group)
    lat = 2 * rank - rope if cache == "matched" else rank
    if not 1 <= lat <= 2 * g * d - rope:
        raise ValueError(f"rank {rank} leaves no room for a latent beside the RoPE key")
    return lat


def _group_indices(g: int, d: int, freqfold: int, j: int) -> tuple[Tensor, Tensor]:
    """Indices into k̃ (g·d) of the real and imaginary parts of frequency group j."""
    half = d // 2
    freqs = torch.arange(j * freqfold, (j + 1) * freqfold)
    real = torch.stack([a * d + freqs for a in range(g)]).reshape(-1)
    return real, real + half


def rorope_rotation(
    key_cov: Tensor, g: int, d: int, freqfold: int, per_group: int = 1
) -> tuple[Tensor, int]:
    """Orthogonal R (g·d, g·d), rows = rotated components: the d_rope RoPE rows first (real
    parts of every group's `per_group` leading components, then their imaginary parts), then
    the rest. DeepSeek-V3's RoPE turns slot per_group·j + c at the source frequency
    j·freqfold + c·freqfold/per_group, so a group's kept components are given to its slots in
    the order of their energy-weighted frequency. Returns (R, d_rope)."""
    groups = d // 2 // freqfold
    rope_re, rope_im, rest = [], [], []
    for j in range(groups):
        re, im = _group_indices(g, d, freqfold, j)
        h = key_cov[re][:, re] + key_cov[im][:, im]  # (g·f, g·f) second moment of the group
        evals, evecs = torch.linalg.eigh((h + h.T) / 2)
        u = evecs[:, torch.argsort(evals, descending=True)]  # columns: strongest first
        kept = _by_frequency(u[:, :per_group], freqfold)
        rope_re += [(re, kept[:, c]) for c in range(per_group)]
        rope_im += [(im, kept[:, c]) for c in range(per_group)]
        rest += [(idx, u[:, c]) for c in range(per_group, u.shape[1]) for idx in (re, im)]
    rows = torch.zeros(g * d, g * d, dtype=torch.float64)
    for n, (idx, vec) in enumerate(rope_re + rope_im + rest):
        rows[n, idx] = vec
    return rows, 2 * groups * per_group


def _by_frequency(components: Tensor, freqfold: int) -> Tensor:
    """Columns sorted by energy-weighted frequency within their group (rows: head-major, then
    the group's `freqfold` frequencies, as `_group_indices` orders them)."""
    local = torch.arange(components.shape[0]) % freqfold  # frequency offset of each row
    centre = (components.pow(2) * local[:, None]).sum(0) / components.pow(2).sum(0)
    return components[:, torch.argsort(centre, stable=True)]


@dataclass(frozen=True)
class LayerWeights:
    """DeepSeek-V3 attention weights of one layer (nn.Linear layout: (out, in))."""

    q_proj: Tensor
    kv_a_proj_with_mqa: Tensor
    kv_a_layernorm: Tensor
    kv_b_proj: Tensor


@dataclass(frozen=True)
class LayerLatent:
    """One layer's RoRoPE rotation and joint position-free latent map, before factoring."""

    rot: Tensor  # (g·d, g·d) rows: RoPE components first
    d_rope: int
    k_rope: Tensor  # (d_rope, D) the decoupled RoPE key
    z: Tensor  # (n_nope + g·d, D): K_nope / ratio stacked over V
    ratio: float  # BKV balance of K_nope against V


def layer_latent(
    attn: Any, cov: Tensor, spec: RestoreSpec, shape: tuple[int, int, int]
) -> LayerLatent:
    """RoRoPE and BKV of one Llama attention layer from its K/V input covariance `cov`."""
    _, g, d = shape
    wk = attn.k_proj.weight.detach().double()  # (g·d, D)
    wv = attn.v_proj.weight.detach().double()  # (g·d, D)
    c = cov.double()
    rot, d_rope = rorope_rotation(wk @ c @ wk.T, g, d, spec.freqfold, spec.rope_per_group)
    k_rot = rot @ wk  # (g·d, D) rotated components
    k_rope, k_nope = k_rot[:d_rope], k_rot[d_rope:]
    ratio = _balance(_mean_square(k_nope, c), _mean_square(wv, c), _mean_square(k_rot, c))
    return LayerLatent(rot, d_rope, k_rope, torch.cat([k_nope / ratio, wv]), ratio)


def latent_spectrum(latent: LayerLatent, cov: Tensor, spec: RestoreSpec) -> Tensor:
    """Descending values whose squares are the energy each latent rank keeps, by the method's
    own objective (weight space, √C-weighted, or output variance)."""
    kind = RESTORE_METHODS[spec.method]
    if kind == "pca":
        second = latent.z @ cov.double() @ latent.z.T
        return torch.linalg.eigvalsh((second + second.T) / 2).clamp_min(0.0).flip(0).sqrt()
    return weighted_spectrum(
        latent.z,
        kind,
        cov=cov,
        alpha=spec.care_alpha,
        lam_frac=spec.care_lambda,
        shrinkage=spec.shrinkage,
    )


def layer_ranks(latents: list[LayerLatent], covs: list[Tensor], spec: RestoreSpec) -> list[int]:
    """Latent rank of each layer: kv_lora_rank everywhere, or water-filled across layers with
    the same total (the cache budget), as CARE allocates ranks, within `spec.rank_bounds`."""
    r = spec.kv_lora_rank
    if spec.schedule == "uniform":
        return [r] * len(latents)
    spectra = [latent_spectrum(lat, c, spec) for lat, c in zip(latents, covs, strict=True)]
    width = min(len(s) for s in spectra)
    low, high = rank_limits(r, width, spec.rank_bounds)
    return waterfill_ranks(spectra, r * len(latents), high, min_rank=low)


def restore_layer(
    attn: Any,
    latent: LayerLatent,
    cov: Tensor,
    spec: RestoreSpec,
    shape: tuple[int, int, int],
    rank: int,
    width: int,
) -> LayerWeights:
    """DeepSeek-V3 weights of one layer whose latent has `rank` components, zero-padded to the
    model's kv_lora_rank `width` (padded components stay zero through healing: their
    gradients vanish, since they are zero on both sides of the RMSNorm)."""
    n_heads, g, d = shape
    wq = attn.q_proj.weight.detach().double().view(n_heads, d, -1)  # (H, d, D)
    c = cov.double()
    a, b = _latent_factors(latent.z, c, spec, rank)  # (D, r), (r, n_nope + g·d)
    a = torch.cat([a, a.new_zeros(a.shape[0], width - rank)], 1)  # (D, width)
    b = torch.cat([b, b.new_zeros(width - rank, b.shape[1])])  # (width, n_nope + g·d)
    n_nope, rot, d_rope = latent.z.shape[0] - g * d, latent.rot, latent.d_rope
    b_k, b_v = b[:, :n_nope].T * latent.ratio, b[:, n_nope:].T  # (n_nope, w), (g·d, w)
    group = n_heads // g
    scale = math.sqrt((d + d_rope) / d)
    q_rows, kv_rows = [], []
    for h in range(n_heads):
        cols = slice((h // group) * d, (h // group + 1) * d)
        q_rows += [wq[h], rot[:d_rope, cols] @ wq[h]]
        kv_rows += [rot[d_rope:, cols].T @ b_k, b_v[cols]]
    latent_rms = math.sqrt(_mean_square(a.T, c))
    dtype = attn.q_proj.weight.dtype
    return LayerWeights(
        q_proj=(torch.cat(q_rows) * scale).to(dtype),
        kv_a_proj_with_mqa=torch.cat([a.T, latent.k_rope]).to(dtype),
        kv_a_layernorm=torch.full((width,), latent_rms, dtype=dtype),
        kv_b_proj=torch.cat(kv_rows).to(dtype),
    )


def _latent_factors(z: Tensor, cov: Tensor, spec: RestoreSpec, rank: int) -> tuple[Tensor, Tensor]:
    """(A (D, r), B (r, out)) with x·Zᵀ ≈ (x·A)·B at r = `rank`, by the method's rule."""
    if RESTORE_METHODS[spec.method] == "pca":
        return output_pca(z, cov, rank)
    f = factorize(
        z,
        rank,
        RESTORE_METHODS[spec.method],
        cov=cov,
        alpha=spec.care_alpha,
        lam_frac=spec.care_lambda,
        shrinkage=spec.shrinkage,
    )
    return f.a.double(), f.b.double()


def output_pca(z: Tensor, cov: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """TransMLA's `pca_calc`: project the outputs y = Z·x onto the top-`rank` eigenvectors U of
    their second moment E[y yᵀ] = Z C Zᵀ, so A = Zᵀ·U and B = Uᵀ (the rank-r map minimising
    E‖y − ŷ‖² over the calibration inputs; CARE's √C-weighted SVD is the same optimum up to
    its shrinkage of C)."""
    second = z @ cov @ z.T  # (out, out)
    evals, evecs = torch.linalg.eigh((second + second.T) / 2)  # ascending
    u = evecs[:, torch.argsort(evals, descending=True)[:rank]]  # (out, r)
    return z.T @ u, u.T


def _balance(nope: float, value: float, key: float) -> float:
    """BKV: the factor dividing K_nope so its RMS matches V's; 1 when the position-free key is
    round-off (all of the key is carried by the RoPE components), which would blow it up."""
    if nope <= 1e-20 * key or value <= 0.0:
        return 1.0
    return math.sqrt(nope / value)


def _mean_square(w: Tensor, cov: Tensor) -> float:
    """E over tokens and output dims of (x·wᵀ)²: tr(w C wᵀ) / rows."""
    return float(torch.trace(w @ cov @ w.T)) / max(w.shape[0], 1)


def deepseek_config(config: Any, spec: RestoreSpec, width: int) -> DeepseekV3Config:
    """A dense DeepSeek-V3 config with the source model's sizes and the restored attention
    (`width` = kv_lora_rank, the widest layer's latent)."""
    n_heads, _, d = _shape(config)
    rope = dict(config.rope_parameters)
    return DeepseekV3Config(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        moe_intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        first_k_dense_replace=config.num_hidden_layers,  # every layer keeps its dense MLP
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,  # keys are already per head: no repeat_kv
        q_lora_rank=None,
        kv_lora_rank=width,
        qk_rope_head_dim=rope_dim(d, spec.freqfold, spec.rope_per_group),
        qk_nope_head_dim=d,
        v_head_dim=d,
        hidden_act=config.hidden_act,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.rms_norm_eps,
        rope_parameters=rope,
        rope_interleave=False,  # rotate_half layout, as Llama
        tie_word_embeddings=config.tie_word_embeddings,
        attention_bias=False,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        architectures=["DeepseekV3ForCausalLM"],
    )


def restore_model(
    model: PreTrainedModel, covs: list[Tensor], spec: RestoreSpec
) -> DeepseekV3ForCausalLM:
    """The DeepSeek-V3 model restored from a Llama `model` with per-layer K/V covariances."""
    shape = _shape(model.config)
    layers = model.model.layers
    if len(covs) != len(layers):
        raise ValueError(f"{len(covs)} covariances for {len(layers)} layers")
    latents = [
        layer_latent(layer.self_attn, c, spec, shape) for layer, c in zip(layers, covs, strict=True)
    ]
    ranks = layer_ranks(latents, covs, spec)
    width = max(ranks)
    out = DeepseekV3ForCausalLM(deepseek_config(model.config, spec, width)).to(model.dtype)
    if spec.schedule != "uniform":
        out.config.kvspec_latent_ranks = ranks  # the real cache: Σ ranks + layers · d_rope
    state = {k: v for k, v in model.state_dict().items() if not _is_attention_qkv(k)}
    for i, (layer, cov) in enumerate(zip(layers, covs, strict=True)):
        w = restore_layer(layer.self_attn, latents[i], cov, spec, shape, ranks[i], width)
        prefix = f"model.layers.{i}.self_attn."
        state[prefix + "q_proj.weight"] = w.q_proj
        state[prefix + "kv_a_proj_with_mqa.weight"] = w.kv_a_proj_with_mqa
        state[prefix + "kv_a_layernorm.weight"] = w.kv_a_layernorm
        state[prefix + "kv_b_proj.weight"] = w.kv_b_proj
    missing, unexpected = out.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise RuntimeError(f"restoration left missing {missing} / unexpected {unexpected} weights")
    if model.config.tie_word_embeddings:
        out.tie_weights()
    return out.eval()


def _is_attention_qkv(name: str) -> bool:
    return any(name.endswith(f"self_attn.{p}_proj.weight") for p in "qkv")


def kv_cache_per_token(config: DeepseekV3Config) -> dict[str, float]:
    """Numbers a latent cache holds per token (latent + RoPE key), per layer on average and
    summed over layers; per-layer ranks (`kvspec_latent_ranks`) count without their padding."""
    layers = config.num_hidden_layers
    ranks = getattr(config, "kvspec_latent_ranks", None) or [config.kv_lora_rank] * layers
    total = sum(ranks) + layers * config.qk_rope_head_dim
    return {"per_layer": total / layers, "total": total}
