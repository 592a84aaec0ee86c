"""Load any model of the study from its `save_pretrained` directory (one loader for all)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

import kvspec.models.modeling_mla  # noqa: F401  (registers the MLA classes with the Auto API)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def native_bfloat16(device: str) -> bool:
    """Whether `device` computes bfloat16 matrix products in hardware: a CUDA GPU that supports
    it, or a CPU with AVX512-BF16 or AMX. Elsewhere PyTorch emulates them, and a bfloat16 forward
    is slower than a float32 one (measured 4.3x slower on an AVX-512 CPU without AVX512-BF16)."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    flags = torch.cpu.get_capabilities()  # PyTorch's cpuinfo reading of this CPU
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype`, with "auto" made "bfloat16" where `device` computes it natively and "float32"
    elsewhere (`native_bfloat16`)."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if native_bfloat16(device) else "float32"


def compute_dtype(device: torch.device | str, dtype: str) -> AbstractContextManager[Any]:
    """bfloat16 autocast on `device` for "bfloat16" (the weights stay as they are); nothing for
    "float32"."""
    if dtype == "float32":
        return nullcontext()
    if dtype != "bfloat16":
        raise ValueError(f"compute dtype must be float32 or bfloat16, got {dtype!r}")
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def use_threads(threads: int | None) -> None:
    """Compute with `threads` CPU threads (a rule's `threads:`); None keeps torch's default."""
    if threads is not None:
        torch.set_num_threads(threads)


def check_positions(label: str, config: Any, needed: int, key: str) -> None:
    """Refuse a run needing more positions than `config`'s model has (`key`: what to lower)."""
    longest = config.max_position_embeddings
    if needed > longest:
        raise ValueError(
            f"{label}: a context plus new tokens of {needed} exceeds max_position_embeddings "
            f"{longest}; lower {key}"
        )


def load_model(
    model_dir: str | os.PathLike[str],
    *,
    dtype: str = "float32",
    device: str = "cpu",
    max_memory: Mapping[Any, int | str] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    linear: str = "torch",
) -> tuple[Any, Any]:
    """(model in eval mode on `device` in `dtype`, tokenizer) of a saved model directory
    (the model as `load_weights` places it)."""
    model = load_weights(model_dir, dtype=dtype, device=device, max_memory=max_memory,
                         offload_dir=offload_dir, linear=linear)  # fmt: skip
    return model, AutoTokenizer.from_pretrained(model_dir)


def load_weights(
    model_dir: str | os.PathLike[str],
    *,
    dtype: str = "float32",
    device: str = "cpu",
    max_memory: Mapping[Any, int | str] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    linear: str = "torch",
) -> Any:
    """The model of a saved model directory in eval mode on `device` in `dtype`, its linear
    layers computing through `linear`'s engine (`kvspec.decoding.packed`: "torch", or the
    batch-invariant CPU kernel "packed" / "packed-bf16" for decoding; no training then).

    A model larger than one GPU is spread over the node's GPUs layer by layer (accelerate's
    big-model placement, `device_map="auto"`); `max_memory` ({device: bytes}) sets that
    placement explicitly (e.g. {"cpu": ..., } with `offload_dir` for what does not fit). The
    spread model computes what the one-device model computes."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    from kvspec.decoding.packed import check_engine, pack_linears

    check_engine(linear)
    if reduced_size(model_dir):
        return pack_linears(_load_reduced(model_dir, dtype).to(device).eval(), linear)
    spread = max_memory or _gpu_budgets(model_dir, dtype, device)
    if spread:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=DTYPES[dtype], device_map="auto", max_memory=dict(spread),
            offload_folder=str(offload_dir) if offload_dir else None,
        )  # fmt: skip
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).to(device)
    return pack_linears(model.eval(), linear)


def reduced_size(model_dir: str | os.PathLike[str]) -> int | None:
    """N when the saved model reads out over a reduced draft vocabulary of N tokens."""
    from kvspec.models.draft_vocab import CONFIG_KEY

    config = Path(model_dir) / "config.json"
    return json.loads(config.read_text()).get(CONFIG_KEY) if config.exists() else None


def _load_reduced(model_dir: str | os.PathLike[str], dtype: str) -> Any:
    """A draft with a reduced output layer (`kvspec.models.draft_vocab`): built from its
    config, the head swapped for a `ReducedHead` of the saved size, every weight loaded
    strictly. A draft is small: one device, no spreading."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from kvspec.models.draft_vocab import attach_reduced_head

    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    attach_reduced_head(model, range(reduced_size(model_dir)))  # ids and weights: loaded below
    state: dict[str, torch.Tensor] = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(str(path)))
    model.load_state_dict(state, strict=True)
    if (Path(model_dir) / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(model_dir)
    return model


def _gpu_budgets(model_dir: str | os.PathLike[str], dtype: str, device: str) -> dict[int, int]:
    """{gpu: bytes} when the weights need more than one of the node's GPUs, else {}."""
    if not device.startswith("cuda") or torch.cuda.device_count() < 2:
        return {}
    usable = int(0.9 * torch.cuda.get_device_properties(0).total_memory)
    if weight_bytes(model_dir, dtype) < 0.8 * usable:  # room left for the KV cache
        return {}
    return {i: usable for i in range(torch.cuda.device_count())}


def weight_bytes(model_dir: str | os.PathLike[str], dtype: str) -> int:
    """Bytes of the saved weights once loaded in `dtype` (from the safetensors headers)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            total += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    return total * torch.finfo(DTYPES[dtype]).bits // 8
