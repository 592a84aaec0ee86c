"""One loader for every model: a model spread over several devices (accelerate's big-model
placement, as a 32B model is spread over a node's GPUs) computes what it computes on one."""

from __future__ import annotations

import pytest
import torch

from kvspec.models import load
from kvspec.models.load import load_model, resolve_dtype, weight_bytes
from tests.tiny import tiny_llama


def _saved(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    model = tiny_llama(0, vocab=64, hidden=32, layers=4, double=False)
    model.save_pretrained(tmp_path / "m")
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0}, "a")))
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m", model


def test_weight_bytes_read_from_the_files(tmp_path) -> None:
    directory, model = _saved(tmp_path)
    params = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert weight_bytes(directory, "float32") == 4 * params
    assert weight_bytes(directory, "bfloat16") == 2 * params


def test_a_model_spread_over_devices_gives_the_same_logits(tmp_path) -> None:
    directory, _ = _saved(tmp_path)
    whole, _ = load_model(directory)
    budget = weight_bytes(directory, "float32") // 2  # half the layers fit: the rest offloaded
    spread, _ = load_model(directory, max_memory={"cpu": budget}, offload_dir=tmp_path / "off")
    assert len(set(spread.hf_device_map.values())) >= 2, spread.hf_device_map  # placed apart
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.inference_mode():
        torch.testing.assert_close(spread(ids).logits, whole(ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_is_bfloat16_only_where_it_is_native(monkeypatch, native) -> None:
    monkeypatch.setattr(load, "native_bfloat16", lambda device: native)
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert resolve_dtype("float32", "cpu") == "float32"  # an explicit dtype is kept
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"


def test_native_bfloat16_reads_the_cpu_flags(monkeypatch) -> None:
    flags = {"avx512_f": True, "avx512_bf16": False, "amx_bf16": False}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: dict(flags))
    assert not load.native_bfloat16("cpu")  # AVX-512 alone emulates bfloat16 products
    flags["amx_bf16"] = True
    assert load.native_bfloat16("cpu")
    flags.update(amx_bf16=False, avx512_bf16=True)
    assert load.native_bfloat16("cpu")
