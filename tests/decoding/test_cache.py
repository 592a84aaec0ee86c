"""kvspec.decoding.cache: the cache operations every decoding loop shares."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvspec.decoding.cache import crop_to, keep_positions


def _cache(length: int, *, inference: bool) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode(inference):
        for layer in range(2):
            kv = torch.arange(length, dtype=torch.float32).view(1, 1, length, 1) + 100 * layer
            cache.update(kv, -kv, layer)
    return cache


def _positions(cache: DynamicCache, layer: int = 0) -> list[float]:
    return cache.layers[layer].keys.flatten().tolist()


@pytest.mark.parametrize("inference", [True, False])
@pytest.mark.parametrize(
    "index", [[0, 1, 2, 5, 7], [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2], [3, 1, 0], [], [0, 2, 2]]
)
def test_keep_positions_keeps_exactly_those_positions_in_order(index, inference) -> None:
    """A tree step keeps its prefix and the accepted path; the pipeline's cells any subset."""
    cache = _cache(8, inference=inference)
    keep_positions(cache, index)
    assert _positions(cache) == [float(i) for i in index]
    assert _positions(cache, 1) == [100.0 + i for i in index]
    assert cache.layers[1].values.flatten().tolist() == [-100.0 - i for i in index]
    assert cache.get_seq_length() == len(index)


def test_a_kept_cache_grows_and_crops_like_a_fresh_one() -> None:
    """The kept slots are a view of the old buffer; the next update appends after them."""
    cache = _cache(8, inference=True)
    keep_positions(cache, [0, 1, 2, 6])
    with torch.inference_mode():
        cache.update(torch.full((1, 1, 2, 1), 9.0), torch.full((1, 1, 2, 1), -9.0), 0)
    assert _positions(cache) == [0.0, 1.0, 2.0, 6.0, 9.0, 9.0]
    crop_to(cache, 3)
    assert _positions(cache) == [0.0, 1.0, 2.0]
