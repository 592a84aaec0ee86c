"""A lean decode forward of a Llama-family causal LM: the drafts' whole forward in one file.

transformers' modules wrap each decoding step of a small draft in ~45 module calls, a causal-mask
builder, output dataclasses and per-call attention dispatch; for a 3-layer draft that plumbing
cost as much as its weights take to stream (`draft` after a target step, 2 threads: 2.6 ms a
step, of which the packed kernel's 22 calls 1.3 ms; the one call below: 1.6-1.8 ms against
2.9-3.6 ms in transformers' forward, alternating in one process, 2026-12-02).
`lean_forward(model)` answers the drafters' call (`input_ids`, `past_key_values`, optional 4-D
additive `attention_mask` and `position_ids`) with the same weights of the same model:

- **chained positions** (a decoding step, a context tail; up to `CHAIN_CALL_MAX`) of a model
  packed for the CPU engine (`kvspec.decoding.packed`) are one C++ call (`llama_step` in
  `kernels/packed_linear.cpp`): the kernel's own row products and RMSNorm, transformers' RoPE
  convention from the model's rotary table, grouped causal attention over the cache, the
  SiLU-gated MLP, the final norm and the head;
- **a draft tree** (positions with a mask), a prompt's prefill, or a model in PyTorch's layers
  (GPUs), goes through the model's modules with only the glue written out:
  RoPE as transformers' `apply_rotary_pos_emb`, attention through torch's SDPA with the mask
  (causal after the cache when none is given), one unmasked position as three small products.

The cache is `StaticKV` (`new_cache()`): keys and values of every layer in one preallocated
buffer, grown by doubling, cropped by moving its length (the `get_seq_length` / `crop` calls
`kvspec.decoding.cache.crop_to` makes).

Only plain Llama layers are taken (`model_type` "llama": no attention or MLP bias, SiLU MLP,
no sliding window); any other model (Qwen3's q/k norms, Gemma's soft caps and windows, the
neural heads that answer like a causal LM) gets `model` itself back. Logits equal
transformers' forward up to float rounding of the attention sums and RoPE products
(tests/decoding/test_lean.py); a draft proposes, it never decides what verification keeps, so
every greedy method stays exact and the samplers keep the target's law whatever the draft's
last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

FIRST_CAPACITY = 1024  # positions a new cache holds before its first doubling
STATIC_ROPE = ("default", "linear", "llama3")  # RoPE types whose angles depend on position only
# Chained positions the C++ call takes; longer feeds (a prompt's prefill) go through the modules,
# whose SDPA beats the call's per-query attention there. `draft` after a 256-token cache, medians
# alternating with a target step (2026-12-02): 1 / 2 / 5 / 16 / 32 / 64 positions 1.8 / 2.1 /
# 2.3 / 5.3 / 8.7 / 15.8 ms in the call, 2.9 / 2.9 / 3.1 / 5.7 / 8.5 / 13.9 through the modules,
# 3.6 / 3.8 / 3.7 / 6.6 / 9.3 / 15.6 in transformers' own forward.
CHAIN_CALL_MAX = 16


@dataclass
class LeanOutput:
    """What the drafters read of a causal LM's output."""

    logits: torch.Tensor  # (1, T, V)
    past_key_values: StaticKV


class StaticKV:
    """Keys and values of every layer, (L, h_kv, capacity, d) each; `length` positions hold."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, *, dtype: torch.dtype,
                 device: Any, capacity: int = FIRST_CAPACITY) -> None:  # fmt: skip
        shape = (layers, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Keep the first `max_length` positions (negative: drop that many), as
        transformers' `DynamicCache.crop`."""
        keep = self.length + max_length if max_length < 0 else min(max_length, self.length)
        self.length = max(keep, 0)

    def reserve(self, more: int) -> None:
        """Room for `more` positions after `length` (the buffers doubled as often as needed)."""
        capacity = self.keys.shape[2]
        if self.length + more <= capacity:
            return
        while capacity < self.length + more:
            capacity *= 2
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros((*old.shape[:2], capacity, old.shape[3]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)


def lean_forward(model: torch.nn.Module) -> Callable[..., Any]:
    """`model`'s lean forward when its layers are plain Llama layers, else `model` itself."""
    return LeanLlama(model) if supports(model) else model


def new_cache(forward: Callable[..., Any]) -> Any:
    """An empty cache for `forward` (a `lean_forward` result): a `StaticKV` for the lean
    forward, transformers' `DynamicCache` for a model's own."""
    if isinstance(forward, LeanLlama):
        return forward.new_cache()
    from transformers import DynamicCache

    return DynamicCache()


def supports(model: torch.nn.Module) -> bool:
    """Whether `lean_forward` computes `model`'s forward (plain Llama layers, no bias)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "llama":
        return False
    plain = not (config.attention_bias or config.mlp_bias) and config.hidden_act == "silu"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    static_rope = rope in STATIC_ROPE  # a table of positions once, not rescaled per call
    return plain and static_rope and getattr(config, "sliding_window", None) is None


class LeanLlama:
    """The decode forward of a `LlamaForCausalLM` (batch 1), sharing its modules."""

    def __init__(self, model: torch.nn.Module) -> None:
        if not supports(model):
            raise ValueError(f"not a plain Llama model: {type(model).__name__}")
        config = model.config
        self.model, self.inner = model, model.model
        self.head = model.get_output_embeddings()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        self.step = _OneCallStep.of(self)  # None: every step through the modules
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # (P, d) cos, sin

    def new_cache(self) -> StaticKV:
        weight = self.inner.embed_tokens.weight
        layers = len(self.inner.layers)
        return StaticKV(layers, self.kv_heads, self.head_dim, dtype=weight.dtype,
                        device=weight.device, capacity=FIRST_CAPACITY)  # fmt: skip

    @torch.inference_mode()
    def __call__(
        self,
        input_ids: torch.Tensor,
        past_key_values: StaticKV | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = True,
    ) -> LeanOutput:
        """Logits of every fed position (1, T, V); the cache holds them afterwards."""
        if input_ids.shape[0] != 1:
            raise ValueError(f"the lean forward decodes one sequence, got {input_ids.shape[0]}")
        cache = self.new_cache() if past_key_values is None else past_key_values
        if not isinstance(cache, StaticKV):
            raise TypeError(f"the lean forward keeps a StaticKV cache (new_cache()), not "
                            f"{type(cache).__name__}")  # fmt: skip
        fed = input_ids.shape[1]
        positions = _positions(position_ids, cache.length, fed)
        cache.reserve(fed)
        if attention_mask is None and self.step is not None and fed <= CHAIN_CALL_MAX:
            logits = self.step(input_ids[0], positions, cache)[None]
        else:
            logits = self._modules_forward(input_ids, positions, attention_mask, cache)
        cache.length += fed
        return LeanOutput(logits, cache)

    def rope(self, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's rotary (cos, sin) rows at `positions`, (T, d) each, from a table of
        its own rotary module's values (extended by doubling)."""
        cos, sin = self.rope_table(max(positions) + 1)
        index = torch.tensor(positions, device=cos.device)
        return cos[index], sin[index]

    def rope_table(self, top: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of positions 0 .. at least top - 1, (P, d) each."""
        if self._rope is None or self._rope[0].shape[0] < top:
            size = max(top, 2 * (0 if self._rope is None else self._rope[0].shape[0]), 1024)
            weight = self.inner.embed_tokens.weight
            ids = torch.arange(size, device=weight.device)[None]
            probe = torch.zeros(1, 1, dtype=weight.dtype, device=weight.device)
            cos, sin = self.inner.rotary_emb(probe, ids)
            self._rope = (cos[0].contiguous(), sin[0].contiguous())
        return self._rope

    def _modules_forward(self, input_ids: torch.Tensor, positions: list[int],
                         mask: torch.Tensor | None, cache: StaticKV) -> torch.Tensor:  # fmt: skip
        fed = input_ids.shape[1]
        x = self.inner.embed_tokens(input_ids)  # (1, T, D)
        cos, sin = (t[None, None] for t in self.rope(positions))  # (1, 1, T, d)
        mask = _mask(mask, fed, cache.length, x.device)
        for i, layer in enumerate(self.inner.layers):
            h = layer.input_layernorm(x)
            x = x + self._attend(layer.self_attn, h, cos, sin, mask, cache, i)
            x = x + _mlp(layer.mlp, layer.post_attention_layernorm(x))
        return self.head(self.inner.norm(x))

    def _attend(
        self,
        attn: Any,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: StaticKV,
        layer: int,
    ) -> torch.Tensor:
        """One layer's attention output (1, T, D) over the cache plus the fed positions."""
        fed, start = h.shape[1], cache.length
        q = attn.q_proj(h).view(1, fed, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(1, fed, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(1, fed, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        cache.keys[layer, :, start : start + fed] = k[0]
        cache.values[layer, :, start : start + fed] = v[0]
        keys = cache.keys[layer : layer + 1, :, : start + fed]  # (1, h_kv, L, d)
        values = cache.values[layer : layer + 1, :, : start + fed]
        if fed == 1 and mask is None:
            out = self._one_query(q, keys, values)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                 scale=self.scale, enable_gqa=True)  # fmt: skip
        return attn.o_proj(out.transpose(1, 2).reshape(1, fed, -1))

    def _one_query(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Grouped attention of one query position, (1, H, 1, d): each KV head's query group
        against its keys as one batched product."""
        group = self.heads // self.kv_heads
        qg = q.view(self.kv_heads, group, self.head_dim)  # (h_kv, G, d)
        scores = torch.bmm(qg, keys[0].transpose(1, 2)) * self.scale  # (h_kv, G, L)
        out = torch.bmm(torch.softmax(scores, dim=-1), values[0])  # (h_kv, G, d)
        return out.view(1, self.heads, 1, self.head_dim)


class _OneCallStep:
    """A one-position step of a packed Llama as one call of the kernel file's `llama_step`."""

    def __init__(self, lean: LeanLlama, norms: list[torch.Tensor], packed: list[torch.Tensor],
                 eps: float) -> None:  # fmt: skip
        from kvspec.decoding.packed import kernel

        self.lean, self.norms, self.packed, self.eps = lean, norms, packed, eps
        self.run = kernel().llama_step
        head = lean.head
        self.reduced = getattr(head, "ids", None)  # a reduced draft readout's token ids
        self.vocab = getattr(head, "vocab_size", None) or head.weight.shape[0]
        self.n_out = head.weight.shape[0]

    @classmethod
    def of(cls, lean: LeanLlama) -> _OneCallStep | None:
        """The one-call step when every layer of the model is packed (the CPU engine)."""
        layers = lean.inner.layers
        norm_mods = [m for layer in layers
                     for m in (layer.input_layernorm, layer.post_attention_layernorm)]  # fmt: skip
        norm_mods.append(lean.inner.norm)
        linears = [m for layer in layers for m in _linears(layer)] + [lean.head]
        if not all(hasattr(m, "packed_norm") for m in norm_mods) or not all(
            hasattr(m, "packed_weight") for m in linears
        ):
            return None
        eps = {m.packed_norm[1] for m in norm_mods}
        if len(eps) != 1:
            return None
        return cls(lean, [m.packed_norm[0] for m in norm_mods],
                   [m.packed_weight for m in linears], eps.pop())  # fmt: skip

    def __call__(self, tokens: torch.Tensor, positions: list[int], cache: StaticKV) -> torch.Tensor:
        """Logits (T, V) of `tokens` (T,) at `positions`, each seeing the cache and the ones
        before it; their keys and values land from `cache.length` on."""
        cos, sin = self.lean.rope_table(max(positions) + 1)
        if len(positions) == 1:
            cos, sin = cos[positions[0]][None], sin[positions[0]][None]  # (1, d): views
        else:
            index = torch.tensor(positions)
            cos, sin = cos[index], sin[index]
        x0 = self.lean.inner.embed_tokens.weight[tokens].float()  # (T, D)
        logits = self.run(x0, cache.length, cos, sin, self.norms, self.packed, self.n_out,
                          cache.keys, cache.values, self.lean.heads, self.eps)  # fmt: skip
        if self.reduced is None:
            return logits
        full = logits.new_full((len(positions), self.vocab), torch.finfo(logits.dtype).min)
        return full.index_copy_(1, self.reduced, logits)


def _linears(layer: Any) -> tuple[Any, ...]:
    attn, mlp = layer.self_attn, layer.mlp
    return (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj,
            mlp.down_proj)  # fmt: skip


def _positions(given: torch.Tensor | None, past: int, fed: int) -> list[int]:
    if given is None:
        return list(range(past, past + fed))
    return [int(p) for p in given.reshape(-1).tolist()]


def _mlp(mlp: Any, h: torch.Tensor) -> torch.Tensor:
    return mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _mask(given: torch.Tensor | None, fed: int, past: int, device: Any) -> torch.Tensor | None:
    """The attention mask of `fed` positions after `past` cached ones: the given additive mask
    (e.g. a draft tree's), else causal (None for one position: it sees everything)."""
    if given is not None:
        if given.dim() != 4:
            raise ValueError(f"the lean forward takes a 4-D additive mask, got {given.dim()}-D")
        return given
    if fed == 1:
        return None
    return torch.ones(fed, past + fed, dtype=torch.bool, device=device).tril(past)
