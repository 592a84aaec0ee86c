"""How the healing loop runs on its processes: `Replicated` (one process, or data parallel with
a full copy of the student per process, through accelerate) or `Sharded` (FSDP2: the student's
weights, gradients and AdamW state, and the teacher's weights, split over the processes, bf16
compute, gradient checkpointing — what an 8B student and its teacher need on 80 GB GPUs).

Both give the healing loop (`kvspec.care.heal.heal`) the same operations; collective ones
(`full_model`, `save_state`, evaluation forwards) are called by every process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from kvspec.models.load import resolve_dtype
from kvspec.models.optim import load_state, save_state
from kvspec.models.parallel import rank_and_world


class Replicated:
    """accelerate's loop: one process on CPU or GPU, or DDP over the process group."""

    def __init__(self, mixed_precision: str) -> None:
        from accelerate import Accelerator

        self.acc = Accelerator(mixed_precision=mixed_precision, cpu=not torch.cuda.is_available())
        self.device, self.rank = self.acc.device, self.acc.process_index
        self.world = self.acc.num_processes

    def start(self, student: torch.nn.Module, teacher: torch.nn.Module,
              make_opt: Callable[[torch.nn.Module], Any], state: Path | None,
              tag: str) -> tuple[Any, torch.nn.Module, Any, int, list[dict]]:  # fmt: skip
        opt = make_opt(student)
        step, curve = load_state(state, student, opt, tag)
        model, opt = self.acc.prepare(student, opt)
        return model, teacher.to(self.device).eval(), opt, step, curve

    @contextlib.contextmanager
    def micro(self, model: Any, sync: bool) -> Iterator[None]:
        with contextlib.nullcontext() if sync else self.acc.no_sync(model), self.acc.autocast():
            yield

    def evaluation(self) -> contextlib.AbstractContextManager[Any]:
        """The precision the prepared student validates in (accelerate wraps its forward in
        this autocast), for the teacher's reference forwards."""
        return self.acc.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        self.acc.backward(loss)

    def clip(self, model: Any, max_norm: float) -> None:
        self.acc.clip_grad_norm_(model.parameters(), max_norm)

    def full_model(self, model: Any) -> torch.nn.Module:
        return self.acc.unwrap_model(model)

    def save_state(self, path: Path, model: Any, opt: Any, step: int, curve: list[dict],
                   tag: str) -> None:  # fmt: skip
        if self.rank == 0:
            save_state(path, self.acc.unwrap_model(model), opt, step, curve, tag)

    def mean(self, value: float) -> float:
        """`value` averaged over the processes."""
        return _mean(value, self.world, self.device)

    def wait(self) -> None:
        self.acc.wait_for_everyone()


class Sharded:
    """FSDP2 over the process group: every decoder layer, then the whole model, sharded."""

    def __init__(self, mixed_precision: str) -> None:
        self.rank, self.world = rank_and_world()
        cuda = torch.cuda.is_available()
        self.device = torch.device(f"cuda:{self.rank}" if cuda else "cpu")
        self.mixed_precision = mixed_precision

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if self.mixed_precision == "bf16" else MixedPrecisionPolicy()  # fmt: skip
        model.to(self.device)
        for layer in model.get_decoder().layers:
            fully_shard(layer, mp_policy=policy)
        return fully_shard(model, mp_policy=policy)

    def start(self, student: torch.nn.Module, teacher: torch.nn.Module,
              make_opt: Callable[[torch.nn.Module], Any], state: Path | None,
              tag: str) -> tuple[Any, torch.nn.Module, Any, int, list[dict]]:  # fmt: skip
        model = self._shard(student)
        teacher = self._shard(teacher.requires_grad_(False)).eval()
        opt = make_opt(model)  # over the sharded parameters
        step, curve = self._load(state, model, opt, tag)
        return model, teacher, opt, step, curve

    @contextlib.contextmanager
    def micro(self, model: Any, sync: bool) -> Iterator[None]:
        model.set_requires_gradient_sync(sync)  # reduce-scatter on the last micro-batch only
        yield

    def evaluation(self) -> contextlib.AbstractContextManager[Any]:
        """Nothing to add: the sharded teacher computes in the policy's parameter dtype, as the
        student does."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip(self, model: Any, max_norm: float) -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def full_model(self, model: Any) -> torch.nn.Module | None:
        """The unsharded model on the first process (collective; None on the others)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=True))  # fmt: skip
        if self.rank:
            return None
        copy = _unsharded(model)
        copy.load_state_dict(full)
        return copy

    def save_state(self, path: Path, model: Any, opt: Any, step: int, curve: list[dict],
                   tag: str) -> None:  # fmt: skip
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_sd, opt_sd = get_state_dict(model, opt, options=options)
        if self.rank == 0:
            from kvspec.io import atomic_path

            with atomic_path(path) as tmp:
                torch.save({"model": model_sd, "opt": opt_sd, "step": step, "curve": curve,
                            "tag": tag}, tmp)  # fmt: skip

    def _load(self, path: Path | None, model: Any, opt: Any, tag: str) -> tuple[int, list]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        if path is None or not path.exists():
            return 0, []
        state = torch.load(path, weights_only=False, map_location="cpu")
        if state.get("tag") != tag:
            return 0, []
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["opt"],
                       options=StateDictOptions(full_state_dict=True))  # fmt: skip
        return state["step"], state["curve"]

    def mean(self, value: float) -> float:
        return _mean(value, self.world, self.device)

    def wait(self) -> None:
        import torch.distributed as dist

        dist.barrier()


def _unsharded(model: Any) -> torch.nn.Module:
    """A fresh, unsharded instance of the sharded model's class, on CPU."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)


def _mean(value: float, world: int, device: torch.device) -> float:
    if world == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / world


def resolve_mixed_precision(value: str) -> str:
    """`value` ("no", "bf16" or "auto"), with "auto" made "bf16" where the device the loop runs
    on (a CUDA GPU if there is one, else the CPU) has bfloat16 products in hardware, "no"
    elsewhere: emulated bfloat16 is slower than float32 (`kvspec.models.load.resolve_dtype`)."""
    if value != "auto":
        return value
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"bfloat16": "bf16", "float32": "no"}[resolve_dtype("auto", device)]


def engine_for(mixed_precision: str, sharding: str) -> Any:
    """`Sharded` when several processes shard the student, else `Replicated`."""
    if sharding == "fsdp" and rank_and_world()[1] > 1:
        return Sharded(mixed_precision)
    return Replicated(mixed_precision)
