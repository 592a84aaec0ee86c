"""What the server sends per drafter kind with each verdict, and how the client takes it in.

For the positions the verification just made permanent (A of them: the last committed token
and the accepted path; the whole prompt but its last token in the first message):

- independent: nothing (tokens only; Table 7: 3A).
- eagle: the target's features (final decoder output), one (A, E) block (3A + A·E).
- moa (Table 7: 3A + 2A·E_kv·(TLI+1)):
  1. the LSA's reduction: the server holds every layer's K/V, so it runs the head's LSA (or
     the "-LSA" layer mean) up to the mean over layers, the (A, 2·E_kv) input of the LSA's
     final linear map; the client applies that map (it holds the head) and gets exactly the
     vectors local drafting computes from the target's cache. (State "o": the features,
     (A, E), as for EAGLE.)
  2. with TLI > 0, the K/V of the target's last TLI layers for those positions, one row per
     (position, layer) in `layer_kv`'s [k_h ‖ v_h] layout: (A·TLI, 2·E_kv). The client holds
     those layers (and the target's embedding, output head and final norm) and keeps their
     cache, as the target's own cache does in local drafting.

Sent losslessly (`lossless`: float64), the client's drafts equal local drafting's exactly;
8-bit quantised (the document's setting) they are close, and the output is greedy decoding's
either way since the server verifies every token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

KINDS = ("independent", "eagle", "moa")


def lsa_reduction(head: nn.Module, kv: torch.Tensor) -> torch.Tensor:
    """The input of the head's LSA output map for the target's K/V (1, T, L, 2·E_kv): the mean
    over layers of LSA's attention (or of the K/V itself, "-LSA").  # (T, 2·E_kv)"""
    seen: list[torch.Tensor] = []
    handle = head.lsa.out.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        head.lsa(kv)
    finally:
        handle.remove()
    return seen[0].reshape(-1, seen[0].shape[-1])


def server_blocks(kind: str, head: nn.Module | None, cache: Any, features: torch.Tensor | None,
                  start: int, end: int) -> list[np.ndarray]:  # fmt: skip
    """The payload of the newly verified positions [start, end) (`cache`: the target's after
    the verification; `features`: its features of those positions, for eagle and state o)."""
    if kind == "independent" or end <= start:
        return []
    if kind == "eagle":
        return [_numpy(features)]
    from kvspec.decoding.cache import layer_kv

    kv = layer_kv(cache, start, end)  # (1, A, L, 2·E_kv)
    tli = head.size.tli
    first = features if head.lsa is None else lsa_reduction(head, kv)
    blocks = [_numpy(first)]
    if tli:
        blocks.append(_numpy(kv[0, :, kv.shape[2] - tli :].reshape(-1, kv.shape[-1])))
    return blocks


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(torch.float64).cpu().numpy()


def _tensor(block: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A received block on the device and in the dtype of the drafter's tensor `like`."""
    return torch.from_numpy(block).to(device=like.device, dtype=like.dtype)


def client_receive(kind: str, drafter: Any, blocks: list[np.ndarray], start: int) -> None:
    """Hand the drafter the payload of the positions from `start` on."""
    if kind == "eagle":
        drafter.observe(_tensor(blocks[0], next(drafter.head.parameters())), start)
    elif kind == "moa":
        receive_moa(drafter, blocks, start)


@torch.inference_mode()
def receive_moa(drafter: Any, blocks: list[np.ndarray], start: int) -> None:
    """A MoA drafter's CA memory and TLI cache for the positions start .. start + A - 1, as
    `MoADrafter.observe_cache` would compute them from the target's cache."""
    from transformers import DynamicCache

    first = _tensor(blocks[0], drafter.lsa)  # (A, 2·E_kv) or (A, E)
    if drafter.head.lsa is None:
        drafter.observe(first, start)
        memory = first
    else:
        memory = drafter.head.lsa.out(first)  # (A, E)
    drafter.lsa = torch.cat([drafter.lsa[:, :start], memory[None]], dim=1)
    if drafter.cache is None:
        drafter.cache = DynamicCache()
    if drafter.tli:
        _extend_tli(drafter, _tensor(blocks[1], drafter.lsa), start)


def _extend_tli(drafter: Any, rows: torch.Tensor, start: int) -> None:
    """Append the TLI layers' K/V rows (A·TLI, 2·E_kv) to the drafter's cache of the target's
    last TLI layers (cropped to `start` first)."""
    tc = drafter.target.config
    layers, kv_heads = tc.num_hidden_layers, tc.num_key_value_heads
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    kv = rows.reshape(-1, drafter.tli, kv_heads, 2 * head_dim)  # (A, TLI, h_kv, 2d)
    for j, idx in enumerate(range(layers - drafter.tli, layers)):
        x = kv[:, j].permute(1, 0, 2)[None]  # (1, h_kv, A, 2d)
        k, v = x[..., :head_dim].contiguous(), x[..., head_dim:].contiguous()
        if len(drafter.cache.layers) > idx and drafter.cache.layers[idx].keys is not None:
            layer = drafter.cache.layers[idx]
            layer.keys, layer.values = layer.keys[:, :, :start], layer.values[:, :, :start]
        drafter.cache.update(k, v, idx)
