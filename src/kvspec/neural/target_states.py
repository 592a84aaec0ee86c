"""The frozen target's states that document 002's heads train on, computed once per training
sequence and cached on disk, shared by every head trained against the same target.

Per sequence: the K/V of every layer (MoA's Layer Self-Attention reads them), the residual
stream entering each of the target's last `depth` decoder layers and its normed final hidden
state (TLI's regression targets; EAGLE's features; the next-token distribution through the
output head). Every head's loss reads its sequence's states through `StateCache.get`: from
disk when an earlier job of the same target stored them, otherwise from one target forward,
stored for the next job (written atomically: parallel jobs may compute the same sequence,
never read half a file). States are kept in `dtype` (e.g. bfloat16, half the disk of float32)
whichever way they came, so a head's training does not depend on which job ran first.
The cache is keyed by the target's weights (a change of model misses every entry).
Without a root (`moa.data.cache_states: false`, the paper scale, where a cache would hold
~164 KB per token of Llama-3-8B: hundreds of TB for its training set) nothing is stored and
every request runs the target's forward, rounded through `dtype` all the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from kvspec.devices import input_device, to_cpu
from kvspec.io import atomic_path


@dataclass(frozen=True)
class TargetStates:
    """One sequence's states: `kv` (1, T, L, 2·E_kv) as `kvspec.neural.moa.layer_kv` lays them
    out, `hidden[d]` (1, T, H) the residual stream entering the target's layer L - d
    (d = 0: the normed final hidden state)."""

    kv: torch.Tensor
    hidden: tuple[torch.Tensor, ...]

    @property
    def final(self) -> torch.Tensor:
        return self.hidden[0]

    def to(self, dtype_or_device: torch.dtype | torch.device) -> TargetStates:
        to = dtype_or_device
        return TargetStates(self.kv.to(to), tuple(h.to(to) for h in self.hidden))


@torch.no_grad()
def compute_states(target: nn.Module, tokens: torch.Tensor, depth: int) -> TargetStates:
    """The states of `tokens` (1, T) from one forward of the target, hidden depths 0..depth
    (at most the target's layers: a deeper depth keeps them all)."""
    from kvspec.decoding.cache import layer_kv

    if depth < 0:
        raise ValueError(f"state depth must be at least 0, not {depth}")
    depth = min(depth, target.config.num_hidden_layers)
    # a config-free cache keeps every position (sliding windows apply through the masks);
    # logits of the last position only: the heads apply the output head themselves
    out = target(input_ids=tokens, past_key_values=DynamicCache(), use_cache=True,
                 output_hidden_states=True, logits_to_keep=1)  # fmt: skip
    kv = layer_kv(out.past_key_values, 0, tokens.shape[1])
    return TargetStates(kv, tuple(out.hidden_states[-1 - d] for d in range(depth + 1)))


@dataclass(frozen=True)
class Readout:
    """The rows of the target's output layer a head's loss reads out through: the tokens it
    drafts over (`readout`), so training and drafting score the same N tokens and a training
    position costs an N-row readout instead of the full vocabulary's. The target's
    distribution is renormalised over those tokens (as FR-Spec and EAGLE-3 train their
    reduced heads); outside them the head can never draft, whatever it learns."""

    weight: torch.Tensor  # (N, H), frozen
    cap: float | None  # the target's final logit soft-capping, if it has one

    def target_logits(self, final: torch.Tensor) -> torch.Tensor:
        """The target's next-token logits over the N tokens from its normed final hidden
        states (soft-capped as the target does), in float32.  # (..., N)"""
        logits = F.linear(final.to(self.weight.device), self.weight).float()
        return torch.tanh(logits / self.cap) * self.cap if self.cap else logits

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """A head's logits over the N tokens from its predicted final hidden states, in
        float32, as it drafts (without soft-capping: the argmax is the same).  # (..., N)"""
        return F.linear(hidden.to(self.weight.device), self.weight).float()


def target_readout(target: nn.Module, ids: Sequence[int] | torch.Tensor | None = None) -> Readout:
    """The `Readout` of `target`'s output rows of `ids` (None: every token)."""
    layer = target.get_output_embeddings()
    if getattr(layer, "bias", None) is not None:
        raise ValueError("heads read out through a bias-free output layer")
    weight = layer.weight.detach()
    if ids is not None:
        weight = weight[torch.as_tensor(ids, dtype=torch.long, device=weight.device)]
    return Readout(weight, getattr(target.config, "final_logit_softcapping", None))


def target_logits(target: nn.Module, final: torch.Tensor) -> torch.Tensor:
    """The target's next-token logits from its normed final hidden states (with the final
    soft-capping of models that have one), in float32."""
    return target_readout(target).target_logits(final)


def top1_match(target_logits: torch.Tensor, head_logits: torch.Tensor) -> float:
    """The share of positions whose greedy token the head's logits give as the target's."""
    return float((target_logits.argmax(-1) == head_logits.argmax(-1)).float().mean())


def weights_fingerprint(model_dir: str | Path) -> str:
    """A short hash of a saved model's weights and config (the cache's key)."""
    digest = hashlib.sha256()
    root = Path(model_dir)
    files = sorted(p for p in root.iterdir() if p.suffix in (".safetensors", ".bin", ".json"))
    for path in (p for p in files if p.name != "source.json"):
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def sequence_key(ids: list[int]) -> str:
    return hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:24]


class StateCache:
    """States of training sequences under `root`/<fingerprint>-d<depth>-<dtype>/ (one file
    per sequence); `get` computes and stores the missing ones. With `root` None nothing is
    stored: every `get` is a miss that runs the target."""

    def __init__(self, root: str | Path | None, target: nn.Module, fingerprint: str, depth: int,
                 dtype: torch.dtype) -> None:  # fmt: skip
        name = f"{fingerprint}-d{depth}-{str(dtype).removeprefix('torch.')}"
        self.dir = Path(root) / name if root is not None else None
        self.target, self.depth, self.dtype = target, depth, dtype
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.model_dtype = next(target.parameters()).dtype
        self.device = input_device(target)
        self.hits = self.misses = 0

    def get(self, ids: list[int]) -> TargetStates:
        """The states of sequence `ids`, in the target's dtype (after a round trip through the
        cache's dtype)."""
        path = self.dir / f"{sequence_key(ids)}.pt" if self.dir is not None else None
        if path is not None and path.exists():
            self.hits += 1
            saved = torch.load(path, map_location="cpu", weights_only=True)
            states = TargetStates(saved["kv"], tuple(saved["hidden"])).to(self.device)
        else:
            self.misses += 1
            tokens = torch.tensor([ids], dtype=torch.long, device=self.device)
            states = compute_states(self.target, tokens, self.depth).to(self.dtype)
            if path is not None:
                with atomic_path(path) as tmp:  # parallel jobs: never half a file
                    torch.save(to_cpu({"kv": states.kv, "hidden": list(states.hidden)}), tmp)
        _check_finite(states, self.dtype)
        return states.to(self.model_dtype)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.dir.glob("*.pt")) if self.dir else 0


def _check_finite(states: TargetStates, dtype: torch.dtype) -> None:
    for name, t in [("kv", states.kv), *((f"hidden[{i}]", h) for i, h in enumerate(states.hidden))]:
        if not torch.isfinite(t).all():
            raise ValueError(f"the target's {name} is not finite in the state cache's dtype "
                             f"{dtype}: choose a wider moa.data.state_dtype")  # fmt: skip
