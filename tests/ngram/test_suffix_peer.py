"""Arctic Inference's suffix tree, built from its source release: it drafts trees the tree
verifier reproduces greedy decoding with, drafts from the corpus, and never from a previous
run of the same request."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.tree import tree_generate
from kvspec.ngram.methods import DecodeSettings, Setup, build_method
from kvspec.ngram.suffix_peer import ArcticSuffixDrafter, build_arctic_suffix
from tests.tiny import tree_llama

pytestmark = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("c++")),
    reason="needs cmake and a C++ compiler (.ci/run installs them)",
)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return build_arctic_suffix(tmp_path_factory.mktemp("arctic") / "suffix", threads=2)


def test_the_build_records_its_source(build) -> None:
    info = json.loads((build / "BUILD.json").read_text())
    assert info["version"] == "0.3.0" and len(info["sdist_sha256"]) == 64
    assert list((build / "arctic_inference" / "suffix_decoding").glob("_C*.so"))


def test_suffix_trees_decode_like_greedy_and_draft_from_the_corpus(build) -> None:
    target = tree_llama(0)
    prompts = [[3, 17, 5, 9, 21], [40, 2, 19, 7, 7, 31]]
    responses = [greedy_generate(target, p, 24) for p in prompts]
    # the corpus holds the target's own responses to these prompts: drafts should pass
    drafter = ArcticSuffixDrafter(build, zip(prompts, responses, strict=True), 8)
    for prompt, response in zip(prompts, responses, strict=True):
        out, steps = tree_generate(target, prompt, drafter, 24)
        assert out == response
        assert sum(s.accepted for s in steps) >= 12
    # an empty corpus: the same requests, decoded twice, must not draft from the first run
    empty = ArcticSuffixDrafter(build, [], 8)
    first = [tree_generate(target, p, empty, 24)[1] for p in prompts]
    again = [tree_generate(target, p, empty, 24)[1] for p in prompts]
    assert [[s.accepted for s in st] for st in first] == [[s.accepted for s in st] for st in again]


def test_the_benchmark_method_uses_the_build_and_the_corpus(build) -> None:
    target = tree_llama(0)
    prompt = [3, 17, 5, 9, 21]
    response = greedy_generate(target, prompt, 20)
    setup = Setup(target, [], 20, DecodeSettings.defaults(k=8, draft_k=4),
                  arctic_suffix=str(build), corpus=[(prompt, response)])  # fmt: skip
    run = build_method("sd_suffix_decoding", setup)(prompt)
    assert run.tokens == response and run.accepted >= 10
    with pytest.raises(ValueError, match="greedily only"):
        build_method("sd_suffix_decoding", replace(setup, mode="sample"))
