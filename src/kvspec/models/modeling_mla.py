"""Latent-KV attention (MLA) model converted from Llama, Qwen3 or Gemma3: one file, whole forward.

The converted model *is* the source architecture (transformers' own ``LlamaModel``,
``Qwen3Model`` or ``Gemma3TextModel``: embedding, norms, MLPs, masks, RoPE) in which every
layer's ``self_attn`` is swapped for one `MLAAttention`. That module keeps the source's q_proj,
o_proj and QK-norms and replaces the GQA projections k_proj / v_proj by low-rank pairs

    latent_k = x · k_aᵀ  (B, T, r_K)      keys   = latent_k · k_bᵀ  (B, T, g_h·d_h)
    latent_v = x · v_aᵀ  (B, T, r_V)      values = latent_v · v_bᵀ  (B, T, g_h·d_h)

and only the latents are cached. Keys are recovered from the cached latent on every step, then
RMS-normalised per head (Qwen3, Gemma3), then rotated with the source's own RoPE module, and
attention runs through the source's attention function (sdpa or eager) with the source's
scaling, masks and sliding windows, so a full-rank conversion reproduces the source exactly.

Values are absorbed when that is cheaper (decoding): softmax(q·kᵀ)·(latent_v·v_bᵀ) =
(softmax(q·kᵀ)·latent_v)·v_bᵀ, so attention runs over the r_V-wide latent (one view shared by
all KV groups, no copy) and each head applies its group's rows of v_b to its r_V-wide output,
instead of rebuilding g_h·d_h values for every cached position. Only steps of at most
`ABSORB_MAX_QUERY` tokens absorb: with values narrower or wider than keys, SDPA's fused kernels
do not apply and its math kernel materialises every (query, key) score, which a long prefill
pays for (measured on the mini CARE model, 8,176 tokens on 2 CPU threads: 48.1 s absorbed,
18.6 s with rebuilt values). Keys cannot be absorbed the
same way: RoPE rotates each key by its own position *after* k_b, so q·R_p·k_b·c_p needs either
the rebuilt keys or a per-position R_pᵀ·q, both of which cost S·r_K·d_h per KV head per step;
a cache of RoPE'd latent-rank keys does not exist because R_p·k_b spans a different subspace
at every position. The key rebuild (S·r_K·g_h·d_h multiply-adds per layer and step) is what
bounds MLA decoding speed against GQA here.

Cache layout: a transformers ``DynamicCache`` with one full-length layer per decoder layer (also
for Gemma3's sliding-window layers, whose windows are applied by HF's sliding-window masks);
"keys" are latent_k as (B, 1, S, r_K), "values" latent_v as (B, 1, S, r_V). ``generate()``,
cropping and beam reordering work unchanged, and the cache holds Σ_layers (r_K + r_V)·S numbers.

Positions: queries get HF's ``position_ids``. The cached keys are the S most recent tokens, so
the key positions are the query positions extended backwards one by one (a cached key at
distance j before the first query has position p₀ − j). That is HF's own numbering for every
unpadded or left-padded sequence (keys of padding are masked), and RoPE only sees differences.

Storage: ``save_pretrained(dir, base_model_dir=base)`` writes only the tensors that differ from
the base model's weights plus a reference to the base (path relative to the saved directory,
size and SHA-256 of its weight files); ``from_pretrained(dir)`` takes the remaining weights
from that base and refuses a base whose weight files changed.

This module imports only the standard library, torch and transformers, so a saved checkpoint
also loads with ``trust_remote_code=True`` outside kvspec.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.cache_utils import Cache, DynamicCache
from transformers.configuration_utils import SubConfigSpec
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_MAPPING
from transformers.models.llama.modeling_llama import rotate_half

BASE_ARCHITECTURES = ("llama", "qwen3", "gemma3_text")
ABSORB_MAX_QUERY = 32  # longest step that may attend over the value latent (module docstring)
# source-config fields mirrored on MLAConfig, read by generic code (caches, lm-eval, kv widths)
MIRRORED = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "initializer_range",
    "tie_word_embeddings",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
)


class MLAConfig(PretrainedConfig):
    """The source model's config (`base_config`) plus per-layer latent ranks for K and V.

    Built either from a source config (``MLAConfig(base_config=llama_config.to_dict(), ...)``)
    or, for tests, from flat source fields (``MLAConfig(hidden_size=64, base_architecture=
    "qwen3", ...)``). `base_model` is the reference written by ``save_pretrained`` when the
    weights are shared with a base model directory. The mirrored fields (vocab_size ...) are
    copies of `base_config`'s; the source's sliding-window fields are deliberately not
    mirrored, so ``DynamicCache(config=mla_config)`` is full-length in every layer.
    """

    model_type = "kvspec_mla"
    keys_to_ignore_at_inference = ["past_key_values"]
    sub_configs_defaults = {"base_config": SubConfigSpec(AutoConfig, model_type="llama")}

    base_config: dict | PretrainedConfig | None = None
    base_architecture: str | None = None
    kv_rank_k: list[int] | None = None
    kv_rank_v: list[int] | None = None
    base_model: dict | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    max_position_embeddings: int | None = None
    initializer_range: float | None = None
    tie_word_embeddings: bool | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    use_cache: bool = True

    def __post_init__(self, **kwargs) -> None:
        if self.base_config is None:
            self.base_config = self._flat_source(kwargs)
        super().__post_init__(**kwargs)
        source = self.base_config
        if source.model_type not in BASE_ARCHITECTURES:
            raise ValueError(
                f"base_architecture must be one of {BASE_ARCHITECTURES}, got {source.model_type!r}"
            )
        self.base_architecture = source.model_type
        for name in MIRRORED:
            setattr(self, name, getattr(source, name, None))
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        full = self.num_key_value_heads * self.head_dim
        self.kv_rank_k = self.kv_rank_k or [full] * self.num_hidden_layers
        self.kv_rank_v = self.kv_rank_v or [full] * self.num_hidden_layers
        self._check_ranks()

    def _flat_source(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Source-config dict from flat fields: the mirrored ones set here and every kwarg that
        names a field of the source config class (popped from `kwargs`)."""
        arch = self.base_architecture or "llama"
        if arch not in BASE_ARCHITECTURES:
            raise ValueError(f"base_architecture must be one of {BASE_ARCHITECTURES}, got {arch!r}")
        names = set(CONFIG_MAPPING[arch].__dataclass_fields__)
        flat = {n: getattr(self, n) for n in MIRRORED if getattr(self, n) is not None}
        flat |= {k: kwargs.pop(k) for k in list(kwargs) if k in names and k not in flat}
        return {"model_type": arch, **flat}

    def _check_ranks(self) -> None:
        for name in ("kv_rank_k", "kv_rank_v"):
            ranks = getattr(self, name)
            if len(ranks) != self.num_hidden_layers or min(ranks) < 1:
                raise ValueError(
                    f"{name} needs {self.num_hidden_layers} positive ranks (one per layer), "
                    f"got {ranks}"
                )


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, H, T, d_h) by the RoPE angles cos/sin (B or 1, T, d_h), as HF does."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, d_h)
    return x * cos + rotate_half(x) * sin


class MLAAttention(nn.Module):
    """Causal GQA attention whose keys/values are decoded from cached low-rank latents.

    Built from one source attention layer (Llama/Qwen3/Gemma3), whose q_proj, o_proj, QK-norms,
    scaling, sliding window and attention function it keeps; `rope_key` names the RoPE table
    it uses (the layer type for Gemma3's global/local bases, None for one shared table).
    """

    def __init__(self, source: nn.Module, rank_k: int, rank_v: int, rope_key: str | None) -> None:
        super().__init__()
        if source.k_proj.bias is not None or source.v_proj.bias is not None:
            raise ValueError("k_proj/v_proj with bias are not supported (factors carry no bias)")
        self.config = source.config  # the source config: attention implementation, dropout
        self.layer_idx = source.layer_idx
        self.head_dim = source.head_dim
        self.num_key_value_groups = source.num_key_value_groups
        self.scaling = source.scaling  # Gemma3: query_pre_attn_scalar ** -0.5
        self.attention_dropout = source.attention_dropout
        self.is_causal = source.is_causal
        self.sliding_window = getattr(source, "sliding_window", None)
        self.rope_key = rope_key
        self.absorb_values: bool | None = None  # None: the cheaper route per call
        self.eager: Callable = inspect.getmodule(type(source)).eager_attention_forward
        d, kv_out = source.k_proj.in_features, source.k_proj.out_features
        self.q_proj = source.q_proj
        self.k_a = nn.Linear(d, rank_k, bias=False)
        self.k_b = nn.Linear(rank_k, kv_out, bias=False)
        self.v_a = nn.Linear(d, rank_v, bias=False)
        self.v_b = nn.Linear(rank_v, kv_out, bias=False)
        self.o_proj = source.o_proj
        for name in ("q_norm", "k_norm"):  # Qwen3, Gemma3: per-head RMSNorm before RoPE
            if hasattr(source, name):
                setattr(self, name, getattr(source, name))

    def _heads(self, x: Tensor, norm: str | None) -> Tensor:
        """(B, T, H·d_h) → (B, H, T, d_h), RMS-normalising each head by `norm` if it exists."""
        x = x.view(*x.shape[:2], -1, self.head_dim)  # (B, T, H, d_h)
        if norm is not None and hasattr(self, norm):
            x = getattr(self, norm)(x)
        return x.transpose(1, 2)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_mask: Tensor | None,
        past_key_values: Cache | None = None,
        key_position_embeddings: dict[str | None, tuple[Tensor, Tensor]] | None = None,
        **kwargs,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states (B, T, d); position_embeddings = cos, sin (B|1, T, d_h) of the queries;
        key_position_embeddings[rope_key] = cos, sin (B|1, S, d_h) of all S keys (from
        `MLAForCausalLM.forward`). Returns (B, T, d) and the attention weights (eager only)."""
        if key_position_embeddings is None:
            raise ValueError("MLAAttention needs key_position_embeddings: call MLAForCausalLM")
        bsz, q_len, _ = hidden_states.shape
        latent_k = self.k_a(hidden_states).unsqueeze(1)  # (B, 1, T, r_K)
        latent_v = self.v_a(hidden_states).unsqueeze(1)  # (B, 1, T, r_V)
        if past_key_values is not None:  # cache stores latents only; returns all S positions
            latent_k, latent_v = past_key_values.update(latent_k, latent_v, self.layer_idx)
        query = self._heads(self.q_proj(hidden_states), "q_norm")  # (B, H, T, d_h)
        key = self._heads(self.k_b(latent_k[:, 0]), "k_norm")  # (B, g_h, S, d_h)
        absorb = self._absorb_values(q_len, latent_v.shape[2])
        if absorb:  # attend over the latent itself; v_b is applied per head afterwards
            value = latent_v.expand(-1, key.shape[1], -1, -1)  # (B, g_h, S, r_V), a view
        else:
            value = self._heads(self.v_b(latent_v[:, 0]), None)  # (B, g_h, S, d_h)
        cos_k, sin_k = key_position_embeddings[self.rope_key]
        if cos_k.shape[1] != key.shape[2]:
            raise ValueError(f"RoPE for {cos_k.shape[1]} keys, cache returned {key.shape[2]}")
        query = _rope(query, *position_embeddings)
        key = _rope(key, cos_k, sin_k)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, self.eager)
        out, weights = attend(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            sliding_window=self.sliding_window,
            **kwargs,
        )  # out: (B, T, H, d_h), or (B, T, H, r_V) when absorbed
        if absorb:
            out = torch.einsum("bthr,hdr->bthd", out, self._value_up_per_head())
        return self.o_proj(out.reshape(bsz, q_len, -1).contiguous()), weights

    def _absorb_values(self, q_len: int, kv_len: int) -> bool:
        """Whether attending over the value latent (then v_b per head) is cheaper than
        rebuilding the values of all kv_len positions: multiply-adds of each route (equal
        results), for steps of at most `ABSORB_MAX_QUERY` tokens (longer ones rebuild, so that
        keys and values have one width and SDPA's fused kernels apply). `absorb_values` =
        True/False forces a route (tests)."""
        if self.absorb_values is not None:
            return self.absorb_values
        if q_len > ABSORB_MAX_QUERY:
            return False
        heads, rank = self.q_proj.out_features // self.head_dim, self.v_b.in_features
        rebuild = kv_len * rank * self.v_b.out_features + q_len * kv_len * heads * self.head_dim
        absorbed = q_len * heads * rank * (kv_len + self.head_dim)
        return absorbed < rebuild

    def _value_up_per_head(self) -> Tensor:
        """v_b's rows of each query head's KV group: (H, d_h, r_V)."""
        w = self.v_b.weight.view(-1, self.head_dim, self.v_b.in_features)  # (g_h, d_h, r_V)
        return w.repeat_interleave(self.num_key_value_groups, dim=0)


def rope_positions(
    position_ids: Tensor | None, past_len: int, q_len: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """(query positions (B|1, T), key positions (B|1, S = past_len + T)).

    Queries default to their cache indices, as in HF. Key positions are the query positions
    preceded by the `past_len` cached ones, counted back from the first query.
    """
    if position_ids is None:
        position_ids = torch.arange(past_len, past_len + q_len, device=device)[None]  # (1, T)
    back = torch.arange(-past_len, 0, device=position_ids.device)  # (S - T,)
    keys = torch.cat([position_ids[:, :1] + back, position_ids], dim=1)  # (B|1, S)
    return position_ids, keys


def _check_latent_cache(cache: Cache | None) -> None:
    """Latents of every layer must be kept for all positions (windows come from the masks)."""
    if cache is None:
        return
    if not isinstance(cache, DynamicCache) or any(cache.is_sliding):
        raise ValueError(
            "the latent cache must be a full-length DynamicCache, e.g. DynamicCache() or "
            f"DynamicCache(config=mla.config); got {type(cache).__name__} with sliding layers "
            f"{[i for i, s in enumerate(cache.is_sliding) if s]}"
        )


def _check_mask(attention_mask: Tensor | dict[str, Tensor] | None, total: int) -> None:
    """A 2-D padding mask must cover every position; a prepared 4-D mask, or one per layer type
    (a dict, as Gemma-3's decoder takes), is the caller's."""
    if isinstance(attention_mask, dict):
        return
    if attention_mask is not None and attention_mask.ndim == 2 and attention_mask.shape[1] != total:
        raise ValueError(
            f"attention_mask covers {attention_mask.shape[-1]} tokens, expected {total}"
        )


def weight_files(model_dir: str | os.PathLike[str]) -> list[Path]:
    """The safetensors files of a `save_pretrained` directory (one file or an index's shards)."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = json.loads(index.read_text())["weight_map"].values()
        return [model_dir / name for name in sorted(set(shards))]
    if (model_dir / "model.safetensors").is_file():
        return [model_dir / "model.safetensors"]
    raise FileNotFoundError(f"{model_dir} holds no model.safetensors (nor an index of shards)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def base_fingerprint(model_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """{file name: {bytes, sha256}} of a model directory's weight files."""
    return {
        f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)} for f in weight_files(model_dir)
    }


def resolve_base(model_dir: str | os.PathLike[str], reference: dict[str, Any]) -> Path:
    """The base directory a saved model refers to, after checking its weight files are the
    ones recorded at save time (same sizes and SHA-256). The path is joined lexically, as it
    was computed, so symlinked model directories resolve as they were named."""
    base = Path(os.path.normpath(os.path.join(os.path.abspath(model_dir), reference["path"])))
    if not base.is_dir():
        raise FileNotFoundError(
            f"{model_dir} takes its unchanged weights from the base model {reference['path']!r} "
            f"(relative to it), but {base} does not exist"
        )
    found = base_fingerprint(base)
    if found != reference["weights"]:
        raise ValueError(
            f"the base model at {base} is not the one {model_dir} was saved against: its weight "
            f"files are {found}, expected {reference['weights']}"
        )
    return base


class MLAPreTrainedModel(PreTrainedModel):
    """Checkpoint I/O and Auto-class plumbing; weight init is the source model's own."""

    config_class = MLAConfig
    config: MLAConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LlamaDecoderLayer", "Qwen3DecoderLayer", "Gemma3DecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_sdpa = True
    # the source's k_proj/v_proj, present in a base model's checkpoint, are replaced by factors
    _keys_to_ignore_on_load_unexpected = [r"self_attn\.[kv]_proj\."]


class MLAForCausalLM(MLAPreTrainedModel, GenerationMixin):
    """The source causal LM with latent-KV attention; supports generate(), labels → loss and
    logits_to_keep. `self.model` is the source's own decoder (e.g. ``Gemma3TextModel``)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MLAConfig) -> None:
        super().__init__(config)
        source = config.base_config
        self.model = MODEL_MAPPING[type(source)](source)
        rotary = self.model.rotary_emb
        per_type = hasattr(rotary, "layer_types")  # Gemma3: one RoPE table per layer type
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            key = attn.layer_type if per_type else None
            layer.self_attn = MLAAttention(attn, config.kv_rank_k[i], config.kv_rank_v[i], key)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _key_rope(self, key_positions: Tensor) -> dict[str | None, tuple[Tensor, Tensor]]:
        """cos, sin (B|1, S, d_h) of every key position, per RoPE table (the source's module)."""
        rotary, like = self.model.rotary_emb, self.model.embed_tokens.weight  # dtype, device
        if not hasattr(rotary, "layer_types"):
            return {None: rotary(like, key_positions)}
        return {kind: rotary(like, key_positions, kind) for kind in rotary.layer_types}

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Logits (B, T', vocab) for the last `logits_to_keep` positions (0 = all) and the cache."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        use_cache = use_cache and not (self.model.gradient_checkpointing and self.training)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)  # full-length in every layer
        _check_latent_cache(past_key_values)
        q_len = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        past_len = past_key_values.get_seq_length() if past_key_values is not None else 0
        _check_mask(attention_mask, past_len + q_len)
        device = self.model.embed_tokens.weight.device
        position_ids, key_positions = rope_positions(position_ids, past_len, q_len, device)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            key_position_embeddings=self._key_rope(key_positions),
            **kwargs,
        )
        hidden = out.last_hidden_state  # (B, T, d)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden[:, keep])
        softcap = getattr(self.config.base_config, "final_logit_softcapping", None)
        if softcap is not None:  # Gemma3 (None for the released checkpoints)
            logits = torch.tanh(logits / softcap) * softcap
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs
            )
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=out.past_key_values,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        *args,
        base_model_dir: str | os.PathLike[str] | None = None,
        final_dir: str | os.PathLike[str] | None = None,
        **kwargs,
    ) -> None:
        """``PreTrainedModel.save_pretrained``; with `base_model_dir`, only the tensors that
        differ from that directory's weights are written, and ``config.base_model`` records the
        base: its path relative to `final_dir` (where the directory will live, default
        `save_directory`) and the size and SHA-256 of its weight files.

        Without `base_model_dir` (or when every tensor differs) the model is saved whole.
        """
        self.config.base_model = None
        if base_model_dir is None or "state_dict" in kwargs:
            return super().save_pretrained(save_directory, *args, **kwargs)
        state, shared = self._differing_state(Path(base_model_dir))
        if shared:
            where = final_dir if final_dir is not None else save_directory
            self.config.base_model = {
                "path": os.path.relpath(os.path.abspath(base_model_dir), os.path.abspath(where)),
                "weights": base_fingerprint(base_model_dir),
            }
        return super().save_pretrained(save_directory, *args, state_dict=state, **kwargs)

    @torch.no_grad()
    def _differing_state(self, base_dir: Path) -> tuple[dict[str, Tensor], int]:
        """(tensors not equal to the base's tensor of the same name, number left out). Tied
        copies (lm_head when tied) are left out too: loading re-ties them."""
        tied = set(self.get_expanded_tied_weights_keys(all_submodels=True))
        state = {k: v for k, v in self.state_dict().items() if k not in tied}
        differ = {}
        with ExitStack() as stack:
            base = {}
            for path in weight_files(base_dir):
                handle = stack.enter_context(safe_open(str(path), framework="pt"))
                base |= dict.fromkeys(handle.keys(), handle)
            for name, tensor in state.items():
                if name in base:
                    stored = base[name].get_tensor(name)
                    same = stored.shape == tensor.shape and torch.equal(
                        stored.to(tensor.dtype), tensor.detach().cpu()
                    )
                    if same:
                        continue
                differ[name] = tensor
        return differ, len(state) - len(differ)

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, load_config, **kwargs):
        """HF's loader, with the base model's weight files read first when the checkpoint was
        saved against a base (its own files then override them)."""
        reference = model.config.base_model
        if reference and state_dict is None and checkpoint_files:
            base = resolve_base(load_config.pretrained_model_name_or_path, reference)
            checkpoint_files = [str(f) for f in weight_files(base)] + list(checkpoint_files)
        return PreTrainedModel._load_pretrained_model(
            model, state_dict, checkpoint_files, load_config, **kwargs
        )


AutoConfig.register(MLAConfig.model_type, MLAConfig, exist_ok=True)
AutoModelForCausalLM.register(MLAConfig, MLAForCausalLM, exist_ok=True)
MLAConfig.register_for_auto_class()
MLAForCausalLM.register_for_auto_class("AutoModelForCausalLM")
