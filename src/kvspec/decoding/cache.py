"""KV-cache operations every decoding loop shares (transformers' DynamicCache)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def crop_to(cache: Any, length: int) -> None:
    """Shrink a DynamicCache to its first `length` positions.

    transformers 5 `crop(n)` takes the number of positions to drop as a negative integer.
    """
    drop = cache.get_seq_length() - length
    if drop < 0:
        raise ValueError(f"cannot grow a cache of {cache.get_seq_length()} to {length}")
    if drop:
        cache.crop(-drop)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def layer_kv(cache: Any, start: int, end: int) -> torch.Tensor:
    """The target cache's keys and values of positions [start, end), per layer, each KV head's
    [k_h ‖ v_h] side by side.  # (B, T, L, 2·E_kv)"""
    per_layer = []
    for layer in cache.layers:
        first = layer.get_seq_length() - layer.keys.shape[-2]  # > 0: a window dropped these
        if start < first:
            raise ValueError(f"a sliding-window cache layer no longer holds position {start}: "
                             "read the K/V from a full cache (DynamicCache())")  # fmt: skip
        span = slice(start - first, end - first)
        k, v = layer.keys[:, :, span], layer.values[:, :, span]  # (B, h_kv, T, d)
        kv = torch.cat([k, v], dim=-1).permute(0, 2, 1, 3)  # (B, T, h_kv, 2d)
        per_layer.append(kv.reshape(*kv.shape[:2], -1))
    return torch.stack(per_layer, dim=2)


def keep_positions(cache: Any, index: Sequence[int]) -> None:
    """Keep the cache positions `index` (in this order) of every layer of a DynamicCache (a
    sliding-window layer only while it still holds every position).

    Positions that stay where they are (the leading run index[i] == i: a tree step's prefix)
    are not copied; only the rest is gathered and written after them, in place, and the
    layer then views the first len(index) slots (a tree step used to copy its whole cache).
    """
    index = list(index)
    same = common_prefix(index, list(range(len(index))))
    tail = torch.tensor(index[same:], dtype=torch.long)
    for layer in cache.layers:
        check_full(layer)
        layer.keys = _kept(layer.keys, same, tail)
        layer.values = _kept(layer.values, same, tail)
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = len(index)


def _kept(states: torch.Tensor, same: int, tail: torch.Tensor) -> torch.Tensor:
    """`states` (..., T, d) with slots same, same + 1, ... holding the positions `tail`
    (gathered before any is overwritten), as a view of its first same + len(tail) slots."""
    if len(tail):
        moved = states.index_select(-2, tail.to(states.device))
        with torch.inference_mode(states.is_inference()):  # a cache filled in either mode
            states[..., same : same + len(tail), :] = moved
    return states[..., : same + len(tail), :]


def check_full(layer: Any, more: int = 0) -> None:
    """Refuse a cache layer that does not (or, after `more` positions, would not) hold every
    position it was fed: tree decoding drops rejected nodes from the middle of it."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if type(layer) is DynamicLayer:
        return
    if type(layer) is not DynamicSlidingWindowLayer:
        raise TypeError(f"tree decoding needs dynamic cache layers, not {type(layer).__name__}")
    if layer.get_seq_length() + more > layer.sliding_window - 1:
        raise ValueError(
            f"a sliding-window cache layer keeps only its last {layer.sliding_window - 1} "
            f"positions; tree decoding past them needs a full cache: DynamicCache() without a "
            f"config (the window is then applied by the attention masks)"
        )
