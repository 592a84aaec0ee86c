"""Mixture of Attentions drafter (document 002), whole forward in this file.

The target (M_Large) keeps its embedding, output head and, for TLI > 0, its last TLI decoder
layers (all frozen, shared by reference). The drafter reads the target's state: for each
verified position, the keys and values of every layer (HF's cache: keys after RoPE), a
(L, 2·E_kv) matrix per token, with each KV head's [k_h ‖ v_h] side by side.

- **Layer Self-Attention (LSA)**: one decoder layer attends over the layer axis of that matrix,
  each token alone (bidirectional, RoPE over the layer index), then the mean over layers and a
  linear map to the target's hidden size: one vector per verified position, computed once per
  verification.
- **Self-Attention (SA)**: one causal decoder layer over the token embeddings (its own cache).
- **Cross-Attention (CA)**: queries from SA, keys/values from LSA's vectors, one RMSNorm applied
  to both streams, RoPE at their own positions, the residual on the query stream, then an MLP.
  A query at position i sees the LSA vectors of positions up to the last verification before
  i: in training, verifications fall every K positions of a response, K drawn uniformly per
  sequence (the document's T-step bounded mask); while drafting, everything verified so far.
- **Target Layer Inference (TLI)**: CA predicts the target's residual stream entering its
  decoder layer L - TLI (TLI = 0: the normed final hidden state); the target's last TLI layers
  (with their cache of the verified positions) and final norm finish it; the output head
  gives the next token (drafting: its rows of the head's reduced vocabulary, if any).

Training (teacher forcing on the target's own K/V and hidden states, no generation) minimises
λ0·CE(p_target, p_drafter) + λ1·SmoothL1 on response positions (the reference code's soft
cross-entropy, equal to the forward KL up to the target's entropy; Table 6: 0.1 / 1.0; with
TLI > 0 the SmoothL1 is averaged over the predicted and the final activations); the CE over
the tokens the head drafts over (`kvspec.neural.target_states.Readout`, all by default). Not
reproduced: the reference code's SA "staircase" curriculum.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    rotate_half,
)

from kvspec.decoding.cache import layer_kv
from kvspec.decoding.drafts import Draft
from kvspec.decoding.tree import (
    DraftTree,
    additive_mask,
    causal_mask,
    grow_tree,
    layer_rope,
    sliding_window,
    tree_rows,
    tree_shape,
)
from kvspec.devices import input_device
from kvspec.models.draft_vocab import readout_of
from kvspec.neural.target_states import (
    Readout,
    TargetStates,
    compute_states,
    target_readout,
    top1_match,
)

STATES = ("lsa", "kv_mean", "o")


@dataclass(frozen=True)
class MoASize:
    """Widths of the drafter's three layers (heads of 64 dims unless the width is smaller)
    and what CA reads (`state`): "lsa" (the architecture), or one of Table 5's ablations —
    "kv_mean" ("-LSA": every layer's K/V averaged over layers and mapped linearly, no
    attention over layers) and "o" ("-LSA, o_1…o_t inputs": the target's last-layer
    features, the vectors EAGLE reads, as CA's keys and values)."""

    lsa_intermediate: int = 768
    sa_intermediate: int = 768
    ca_intermediate: int = 1536
    tli: int = 0
    state: str = "lsa"


def llama_layer_config(hidden: int, intermediate: int, kv_heads: int, positions: int,
                       eps: float, theta: float) -> LlamaConfig:  # fmt: skip
    """A Llama decoder layer's config of this width (heads of 64 dims, or one head)."""
    head_dim = min(64, hidden)
    heads = hidden // head_dim
    kv = max(1, min(kv_heads, heads))
    while heads % kv:
        kv -= 1
    config = LlamaConfig(hidden_size=hidden, intermediate_size=intermediate,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                         max_position_embeddings=positions, rms_norm_eps=eps,
                         rope_parameters={"rope_type": "default", "rope_theta": theta})  # fmt: skip
    config._attn_implementation = "sdpa"
    return config


class LayerSelfAttention(nn.Module):
    """Attention over the layer axis of each token's (L, 2·E_kv) matrix, mean, linear map."""

    def __init__(self, layers: int, width: int, kv_heads: int, intermediate: int, out: int,
                 eps: float) -> None:  # fmt: skip
        super().__init__()
        config = llama_layer_config(width, intermediate, kv_heads, layers, eps, 10000.0)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(config)
        self.out = nn.Linear(width, out, bias=True)

    def forward(self, kv: torch.Tensor) -> torch.Tensor:
        """(B, T, L, 2·E_kv) -> (B, T, hidden)."""
        b, t, n_layers, width = kv.shape
        x = kv.reshape(b * t, n_layers, width)
        positions = torch.arange(n_layers, device=x.device)[None].expand(b * t, -1)
        full = torch.zeros(1, 1, n_layers, n_layers, dtype=x.dtype, device=x.device)
        x = self.layer(x, attention_mask=full, position_ids=positions,
                       position_embeddings=self.rotary(x, position_ids=positions))  # fmt: skip
        return self.out(x.mean(dim=1)).reshape(b, t, -1)


class LayerMean(nn.Module):
    """Table 5's "-LSA": the mean of each token's per-layer K/V, mapped linearly."""

    def __init__(self, width: int, out: int) -> None:
        super().__init__()
        self.out = nn.Linear(width, out, bias=True)

    def forward(self, kv: torch.Tensor) -> torch.Tensor:
        """(B, T, L, 2·E_kv) -> (B, T, hidden)."""
        return self.out(kv.mean(dim=2))


class CrossAttention(nn.Module):
    """Queries from the token stream, keys/values from LSA's vectors; pre-norm shared by both
    streams, RoPE at each stream's own positions, residual on the queries, then an MLP."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hidden, d = config.hidden_size, config.head_dim
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads,
                                                    config.num_key_value_heads, d)  # fmt: skip
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.q = nn.Linear(hidden, self.heads * d, bias=False)
        self.k = nn.Linear(hidden, self.kv_heads * d, bias=False)
        self.v = nn.Linear(hidden, self.kv_heads * d, bias=False)
        self.o = nn.Linear(self.heads * d, hidden, bias=False)
        self.post_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(self, x: torch.Tensor, x_pos: torch.Tensor, kv: torch.Tensor,
                kv_pos: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """x (B, Tq, H) at x_pos (B, Tq); kv (B, Tk, H) at kv_pos (B, Tk); allowed (B, Tq, Tk)."""
        b, tq, _ = x.shape
        q_in, k_in = self.norm(x), self.norm(kv)
        q = self._rope(self.q(q_in).view(b, tq, self.heads, -1).transpose(1, 2), q_in, x_pos)
        k = self.k(k_in).view(b, -1, self.kv_heads, self.head_dim).transpose(1, 2)
        k = self._rope(k, k_in, kv_pos)
        v = self.v(k_in).view(b, -1, self.kv_heads, self.head_dim).transpose(1, 2)
        attn = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed[:, None], enable_gqa=True
        )  # (B, heads, Tq, d)
        x = x + self.o(attn.transpose(1, 2).reshape(b, tq, -1))
        return x + self.mlp(self.post_norm(x))

    def _rope(self, t: torch.Tensor, ref: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(ref, position_ids=positions)  # (B, T, d)
        cos, sin = cos[:, None], sin[:, None]
        return t * cos + rotate_half(t) * sin


class MoAHead(nn.Module):
    """LSA, SA and CA, sized relative to `target`; its frozen parts are the target's own."""

    def __init__(self, target: nn.Module, size: MoASize = MoASize()) -> None:
        super().__init__()
        tc = target.config
        hidden, eps = tc.hidden_size, tc.rms_norm_eps
        head_dim = getattr(tc, "head_dim", None) or hidden // tc.num_attention_heads
        width = 2 * tc.num_key_value_heads * head_dim
        if not 0 <= size.tli < tc.num_hidden_layers:
            raise ValueError(f"tli must lie in [0, {tc.num_hidden_layers - 1}], not {size.tli}")
        _check_tli(tc, size.tli)
        if size.state not in STATES:
            raise ValueError(f"state must be one of {STATES}, not {size.state!r}")
        self.size = size
        self.lsa: nn.Module | None = None  # state "o": CA reads the features as they are
        if size.state == "lsa":
            self.lsa = LayerSelfAttention(tc.num_hidden_layers, width, tc.num_key_value_heads,
                                          size.lsa_intermediate, hidden, eps)  # fmt: skip
        elif size.state == "kv_mean":
            self.lsa = LayerMean(width, hidden)
        theta = rope_theta(tc)
        sa = llama_layer_config(hidden, size.sa_intermediate, tc.num_key_value_heads,
                     tc.max_position_embeddings, eps, theta)  # fmt: skip
        self.sa = LlamaDecoderLayer(sa, layer_idx=0)
        self.sa_rotary = LlamaRotaryEmbedding(sa)
        ca = llama_layer_config(hidden, size.ca_intermediate, tc.num_key_value_heads,
                     tc.max_position_embeddings, eps, theta)  # fmt: skip
        self.ca = CrossAttention(ca)
        self.to(dtype=next(target.parameters()).dtype)

    def queries(self, embeds: torch.Tensor, positions: torch.Tensor, cache: Any = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """SA over token embeddings (B, T, H) at positions (B, T), causal after `cache`."""
        if mask is None:
            past = cache.get_seq_length() if cache is not None else 0
            mask = causal_mask(past, embeds.shape[1], embeds.dtype).to(embeds.device)
        rope = self.sa_rotary(embeds, position_ids=positions)
        return self.sa(embeds, attention_mask=mask, position_ids=positions,
                       past_key_values=cache, use_cache=cache is not None,
                       position_embeddings=rope)  # fmt: skip

    def memory(self, kv: torch.Tensor | None, features: torch.Tensor | None) -> torch.Tensor:
        """CA's keys/values source per verified position from the target's K/V (B, T, L,
        2·E_kv) or, for state "o", its features (B, T, H).  # (B, T, H)"""
        if self.lsa is None:
            if features is None:
                raise ValueError("a MoA head of state 'o' reads the target's features")
            return features
        if kv is None:
            raise ValueError(f"a MoA head of state {self.size.state!r} reads the target's K/V")
        return self.lsa(kv)


def _check_tli(config: Any, tli: int) -> None:
    """TLI reuses the target's last `tli` layers with full attention: none may slide."""
    types = list(getattr(config, "layer_types", None) or [])
    last = types[len(types) - tli :] if tli else []
    if sliding_window(config) and "sliding_attention" in last:
        raise ValueError(f"tli = {tli} would reuse sliding-window target layers ({last}): "
                         "TLI reuses full-attention layers only")  # fmt: skip


def rope_theta(config: Any) -> float:
    """The target's RoPE base; with one base per layer type (Gemma-3), its full-attention
    layers' (the one for long distances)."""
    params = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" not in params and isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def verification(
    n: int, prompt: int, period: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which of n positions the target verified in training (every prompt position, then every
    `period`-th response position) and, for each position i, the last verified position
    before i (-1 for none): what a query at i may see.  # (n,) bool, (n,) long"""
    verified = [i < prompt or (i - prompt) % period == period - 1 for i in range(n)]
    last, bound = -1, []
    for i in range(n):
        bound.append(last)
        last = i if verified[i] else last
    return torch.tensor(verified, device=device), torch.tensor(bound, device=device)


def moa_forward(head: MoAHead, target: nn.Module, tokens: torch.Tensor,
                kv: torch.Tensor | None, bound: torch.Tensor,
                features: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Teacher-forced predictions of the target's activation entering layer L - TLI, for every
    position: tokens (1, T), the target's K/V (1, T, L, 2·E_kv) or features (1, T, H) (state
    "o"), `bound` (T,) from `verification`.  # (1, T, H)"""
    t = tokens.shape[1]
    positions = torch.arange(t, device=tokens.device)[None]
    q = head.queries(target.get_input_embeddings()(tokens), positions)
    lsa = head.memory(kv, features)  # (1, T, H)
    j = torch.arange(t, device=tokens.device)
    allowed = j[None, :] <= bound[:, None]  # (T, T)
    allowed[bound < 0, 0] = True  # position 0 has nothing before it: it sees itself (unused)
    return head.ca(q, positions, lsa, positions, allowed[None])


def finish(target: nn.Module, tli: int, pred: torch.Tensor, positions: torch.Tensor,
           cache: Any = None, mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The target's last `tli` decoder layers and final norm on `pred` (TLI = 0: as is);
    full-attention layers only (`mask` would need a window for sliding ones)."""
    if tli == 0:
        return pred
    decoder = target.get_decoder()
    layers = decoder.layers[len(decoder.layers) - tli :]
    types = (getattr(target.config, "layer_types", None) or [None] * len(decoder.layers))[-tli:]
    if sliding_window(target.config) is not None and any(t != "full_attention" for t in types):
        raise ValueError(f"TLI = {tli} would run sliding-window layers of the target "
                         f"({types}); only full-attention layers are supported")  # fmt: skip
    if mask is None:
        past = cache.get_seq_length() if cache is not None else 0
        mask = causal_mask(past, pred.shape[1], pred.dtype).to(pred.device)
    for layer, rope in zip(layers, layer_rope(decoder.rotary_emb, pred, positions, layers),
                           strict=True):  # fmt: skip
        pred = layer(pred, attention_mask=mask, position_ids=positions, past_key_values=cache,
                     use_cache=cache is not None, position_embeddings=rope)  # fmt: skip
    return decoder.norm(pred)


def moa_loss(head: MoAHead, target: nn.Module, tokens: torch.Tensor, first: int,
             rng: random.Random, periods: tuple[int, int] = (5, 15), lambda_kl: float = 0.1,
             lambda_reg: float = 1.0, states: TargetStates | None = None,
             readout: Readout | None = None) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
    """One sequence (1, T) whose next tokens are learned from position `first` on (the last
    prompt token): the target's K/V and hidden states (`states`, or one target forward),
    positions before `first` verified, then a verification every period (drawn from
    `periods`) positions, the loss on positions `first`.. (each predicts its own final
    activation, i.e. the next token); the CE over the tokens of `readout` (None: all)."""
    tli = head.size.tli
    states = states or compute_states(target, tokens, tli)
    readout = readout or target_readout(target)
    kv, truth, final = states.kv, states.hidden[tli], states.final  # (1, T, ...)
    t, device = tokens.shape[1], tokens.device
    verified, bound = verification(t, first, rng.randint(*periods), device)
    pred = moa_forward(head, target, tokens, kv, bound, final)
    rows = torch.arange(t, device=device) >= max(first, 1)
    if tli:  # verified positions enter the last layers as the target's own activations
        rows &= ~verified
        reg = F.smooth_l1_loss(pred[0, rows], truth[0, rows])
        mixed = torch.where(verified[None, :, None], truth, pred)
        pred = finish(target, tli, mixed, torch.arange(t, device=device)[None])
        reg = (reg + F.smooth_l1_loss(pred[0, rows], final[0, rows])) / 2
    else:
        reg = F.smooth_l1_loss(pred[0, rows], truth[0, rows])
    with torch.no_grad():
        p_logits = readout.target_logits(final[0, rows])
    q_logits = readout.head_logits(pred[0, rows])
    ce = -(torch.softmax(p_logits, -1) * torch.log_softmax(q_logits, -1)).sum(-1).mean()
    loss = lambda_kl * ce + lambda_reg * reg
    parts = {"ce": ce, "smooth_l1": reg, "loss": loss}
    return loss, {**{k: float(v.detach()) for k, v in parts.items()},
                  "match": top1_match(p_logits, q_logits)}  # fmt: skip


class MoADrafter:
    """Greedy chain drafts (Algorithm 1 of the document): LSA once per verification on the
    newly verified positions, then SA + CA (+ the target's last TLI layers) per token."""

    def __init__(self, head: MoAHead, target: nn.Module) -> None:
        self.head, self.target = head.eval(), target
        self.tli = head.size.tli
        dtype, self.device = next(target.parameters()).dtype, input_device(target)
        self.lsa = torch.zeros(
            1, 0, target.config.hidden_size, dtype=dtype, device=self.device
        )  # CA's vectors of the verified positions
        self.cache: Any = None  # the target's cache (observe_cache)
        self.features: list[torch.Tensor] = []  # state "o": features of committed positions
        self.sa_cache: Any = None
        self.sa_tokens: list[int] = []  # tokens in the SA cache

    def observe(self, features: torch.Tensor, start: int) -> None:
        """The target's features (m, H) of positions start .. start + m - 1 (kept for state
        "o" only; the loop calls this before `observe_cache`)."""
        if self.head.size.state == "o":
            del self.features[start:]
            self.features += list(features)

    def observe_cache(self, cache: Any) -> None:
        """The target's cache after a verification: positions [0, n) are verified."""
        self.cache = cache
        n, have = cache.get_seq_length(), self.lsa.shape[1]
        keep = min(have, n)
        with torch.inference_mode():
            new = self._memory(keep, n) if n > keep else self.lsa[:, :0]
        self.lsa = torch.cat([self.lsa[:, :keep], new.to(self.lsa.dtype)], dim=1)

    def _memory(self, start: int, end: int) -> torch.Tensor:
        """CA's vectors of the verified positions [start, end).  # (1, end - start, H)"""
        if self.head.size.state == "o":
            return torch.stack(self.features[start:end])[None]
        return self.head.memory(layer_kv(self.cache, start, end), None)

    @torch.inference_mode()
    def propose(self, context: list[int], k: int) -> Draft:
        """Up to k greedy tokens after `context`, whose first len - 1 positions are verified."""
        n = len(context) - 1
        if k < 1 or n < 1:
            self._check(n)
            return Draft([], None)
        q = self._sync(context)  # query of the last context token
        drafts: list[int] = []
        for i in range(k):
            token = self._next(q, n + i)
            drafts.append(token)
            if i + 1 < k:
                q = self._queries([token], n + i + 1)
        self._rewind(context)
        return Draft(drafts, None)

    def _check(self, n: int) -> None:
        if self.cache is None or self.lsa.shape[1] != n:
            raise RuntimeError(f"MoADrafter knows {self.lsa.shape[1]} verified positions, the "
                               f"context has {n}: the loop must call observe_cache()")  # fmt: skip

    def _sync(self, context: list[int]) -> torch.Tensor:
        """Feed SA the context tokens its cache lacks; the last one's query.  # (1, 1, H)"""
        from kvspec.decoding.cache import common_prefix, crop_to

        n = len(context) - 1
        self._check(n)
        keep = common_prefix(self.sa_tokens, context[:n])
        if self.sa_cache is None or keep == 0:
            self.sa_cache, self.sa_tokens, keep = DynamicCache(), [], 0
        crop_to(self.sa_cache, keep)
        self.sa_tokens = self.sa_tokens[:keep]
        return self._queries(context[keep:], keep)[:, -1:]

    def _rewind(self, context: list[int]) -> None:
        """Forget drafted positions: SA keeps the context, the TLI layers the verified ones."""
        from kvspec.decoding.cache import crop_to

        crop_to(self.sa_cache, len(context))
        self.sa_tokens = list(context)
        self._crop_tli(len(context) - 1)

    def _queries(self, tokens: list[int], start: int) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device)[None]
        embeds = self.target.get_input_embeddings()(ids)
        return self.head.queries(embeds, positions, self.sa_cache)

    def _next(self, q: torch.Tensor, position: int) -> int:
        pred = self.activation(q, position)
        return int(torch.argmax(readout_of(self.head, self.target)(pred[0, -1])))

    def activation(self, q: torch.Tensor, position: int) -> torch.Tensor:
        """The final activation drafted for the query q (1, 1, H) at `position`: CA over every
        verified LSA vector, then the target's last TLI layers (their cache grows by one).
        # (1, 1, H)"""
        return self.activations(q, torch.tensor([[position]], device=self.device))

    def activations(self, q: torch.Tensor, positions: torch.Tensor,
                    tli_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """`activation` for queries q (1, m, H) at positions (1, m); the TLI layers see their
        cache and these queries through `tli_mask` (default causal).  # (1, m, H)"""
        m = q.shape[1]
        kv_pos = torch.arange(self.lsa.shape[1], device=self.device)[None]
        allowed = torch.ones(1, m, self.lsa.shape[1], dtype=torch.bool, device=self.device)
        pred = self.head.ca(q, positions, self.lsa, kv_pos, allowed)
        if self.tli:
            past = self.cache.layers[-1].get_seq_length()
            mask = (tli_mask if tli_mask is not None
                    else causal_mask(past, m, pred.dtype).to(self.device))  # fmt: skip
            pred = finish(self.target, self.tli, pred, positions, self.cache, mask)
        return pred

    def _crop_tli(self, n: int) -> None:
        """Drop the drafted positions the last TLI layers added to the target's cache."""
        for layer in self.cache.layers[len(self.cache.layers) - self.tli :] if self.tli else []:
            layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]


class MoATreeDrafter(MoADrafter):
    """EAGLE-2's dynamic draft tree grown by a MoA head: the tree's nodes go through SA and
    the TLI layers together under a tree mask (each sees the context and its ancestors); CA
    sees every verified LSA vector. Greedy verification only (`kvspec.decoding.tree`)."""

    def __init__(self, head: MoAHead, target: nn.Module, depth: int, topk: int,
                 total: int) -> None:  # fmt: skip
        super().__init__(head, target)
        self.depth, self.topk, self.total = tree_shape(depth, topk, total)

    @torch.inference_mode()
    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        n, depth = len(context) - 1, min(self.depth, max_depth)
        if depth < 1 or n < 1:
            self._check(n)
            return DraftTree()
        lm_head = readout_of(self.head, self.target)
        root = lm_head(self.activation(self._sync(context), n)[0, -1])  # (V,)
        fed_sa: dict[int, int] = {}
        fed_tli: dict[int, int] = {}

        def feed(tree: DraftTree, nodes: list[int]) -> torch.Tensor:
            depths = tree.depths()
            positions = torch.tensor([[n + depths[v] for v in nodes]], device=self.device)
            ids = torch.tensor([[tree.tokens[v] for v in nodes]], device=self.device)
            embeds = self.target.get_input_embeddings()(ids)
            q = self.head.queries(
                embeds,
                positions,
                self.sa_cache,
                self._tree_mask(tree, nodes, fed_sa, self.sa_cache, n, 0),
            )
            mask = self._tree_mask(tree, nodes, fed_tli, self.cache, n, -1) if self.tli else None
            return lm_head(self.activations(q, positions, mask)[0])  # (m, V)

        tree = grow_tree(root, feed, depth, self.topk, self.total)
        self._rewind(context)
        return tree

    def _tree_mask(self, tree: DraftTree, nodes: list[int], fed: dict[int, int], cache: Any,
                   n: int, layer: int) -> torch.Tensor:  # fmt: skip
        """Additive mask of `nodes` over `cache` (layer `layer`'s length) + themselves: the
        n + 1 context positions and their fed ancestors."""
        past = cache.layers[layer].get_seq_length()
        rows = tree_rows(tree, nodes, fed, past)
        dtype = next(self.head.parameters()).dtype
        return additive_mask(rows, past, dtype, prefix=n + 1).to(self.device)
