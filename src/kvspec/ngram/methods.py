"""Build every benchmark method from its declaration (`kvspec.ngram.registry`): the loop it
runs in and the drafter that feeds it. A method decodes one prompt and returns a timed `Run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kvspec.decoding.bench import ForwardCounter, Method, Run, run_of_steps
from kvspec.decoding.draft_model import DraftModelDrafter, ModelTreeDrafter
from kvspec.decoding.loop import greedy_generate, speculative_generate, truncate_at_eos
from kvspec.decoding.tree import tree_generate
from kvspec.io import read_json
from kvspec.ngram.adaptive import AdaptiveBranches, AdaptiveDrafter, Calibration, Fallback
from kvspec.ngram.drafters import InfiniGramDrafter, PromptLookupDrafter, RequestSuffixDrafter
from kvspec.ngram.index import open_engine
from kvspec.ngram.local_tree import HybridTreeDrafter, LocalTreeSettings
from kvspec.ngram.registry import MethodDecl, method
from kvspec.seeds import derive


@dataclass(frozen=True)
class DecodeSettings:
    """The config's `spec.decode` block (its defaults live in the schema): draft depths, the
    n-gram cut-offs, the adaptive depth's threshold, prior weight, longest draft and
    request-local drafter, and the tree shapes."""

    k: int  # n-gram and prompt-lookup draft depth
    draft_k: int  # draft-model draft depth
    confidence: float
    min_match: int
    threshold: float
    prior_weight: float
    adaptive_k: int  # most tokens an adaptive draft (and SuffixDecoding's) may hold
    local: str  # the hybrid's request-local drafter: "suffix" or "prompt_lookup"
    tree: Mapping[str, int]  # sd_draft_tree: depth, topk, total
    local_tree: Mapping[str, Any]  # sd_hybrid_*_tree: LocalTreeSettings fields
    draft_confidence: float  # a draft model's draft ends below this probability
    fallback: Mapping[str, Any]  # a hybrid's draft-model fallback: gate, k

    @classmethod
    def from_config(cls, decode: Mapping[str, Any]) -> DecodeSettings:
        adaptive = decode["adaptive"]
        return cls(decode["k"], decode["draft_k"], decode["confidence"], decode["min_match"],
                   adaptive["threshold"], adaptive["prior_weight"], adaptive["k"],
                   adaptive["local"], dict(decode["tree"]), dict(decode["local_tree"]),
                   decode["draft_confidence"], dict(adaptive["fallback"]))  # fmt: skip

    @classmethod
    def defaults(cls, **overrides: Any) -> DecodeSettings:
        """The schema's `spec.decode` defaults with `overrides` (no config file needed)."""
        from kvspec.config import schema_defaults

        return cls.from_config({**schema_defaults("spec", "decode"), **overrides})


@dataclass(frozen=True)
class Setup:
    """What the methods of one benchmark job share: the target, the stop tokens and token
    budget, the decode settings, the verification mode and seed, and the drafters' sources
    (draft model, opened indexes by name, their acceptance rows, the suffix-tree build, the
    llama.cpp build and the target's GGUF file)."""

    target: torch.nn.Module
    stops: list[int]
    max_new_tokens: int
    decode: DecodeSettings
    mode: str = "greedy"
    seed: int = 0
    draft: torch.nn.Module | None = None
    engines: Mapping[str, Any] = field(default_factory=dict)  # index name -> engine
    calibrations: Mapping[str, Any] = field(default_factory=dict)  # index name -> rows
    arctic_suffix: str | None = None  # build directory of Arctic Inference's suffix tree
    corpus: Sequence[tuple[list[int], list[int]]] = ()  # (prompt, response) ids it starts from
    llama_cpp: str | None = None  # build directory of llama-cpp-python
    gguf: str | None = None  # the target's GGUF file (llama.cpp's methods)


def input_indexes(inputs: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """index name -> (index directory, build-stats JSON) of the `index_sft` / `index_target`
    inputs a rule passes (with their `*_stats`)."""
    return {
        name.removeprefix("index_"): (inputs[name], inputs[f"{name}_stats"])
        for name in ("index_sft", "index_target")
        if name in inputs
    }


def open_engines(indexes: Mapping[str, tuple[str, str]], max_support: int) -> dict[str, Any]:
    """name -> opened infini-gram engine, from (index directory, its build-stats JSON)."""
    engines = {}
    for name, (index_dir, stats_path) in indexes.items():
        stats = read_json(stats_path)
        engines[name] = open_engine(
            index_dir, stats["vocab_size"], stats["eos_token_id"], max_support
        )
    return engines


def build_method(name: str, setup: Setup) -> Method:
    """The callable that decodes one prompt with method `name`."""
    decl = method(name)
    return LOOPS[decl.loop](name, decl, setup)


def benchmark_methods(
    setup: Setup, names: Sequence[str], modes: Sequence[str]
) -> dict[str, Method]:
    """Every listed method; chain methods once per verification mode ("sd_x@sample")."""
    methods = {}
    for mode in modes:
        mode_setup = replace(setup, mode=mode)
        for name in names:
            if mode == "greedy":
                methods[name] = build_method(name, mode_setup)
            elif not method(name).greedy_only:
                methods[f"{name}@{mode}"] = build_method(name, mode_setup)
    return methods


# ---- loops ------------------------------------------------------------------------------------
def _greedy_loop(name: str, decl: MethodDecl, setup: Setup) -> Method:
    def run(prompt: list[int], max_new_tokens: int | None = None) -> Run:
        budget = max_new_tokens or setup.max_new_tokens
        with ForwardCounter(setup.target) as fc:
            t0 = time.perf_counter()
            tokens = greedy_generate(setup.target, prompt, budget, setup.stops)
            seconds = time.perf_counter() - t0
        return Run(tokens, seconds, fc.calls - (len(prompt) > 1))  # prefill produces nothing

    return run


def _hf_loop(name: str, decl: MethodDecl, setup: Setup) -> Method:
    """transformers' `generate`, greedy, with prompt lookup or an assistant model."""
    extra: dict[str, Any] = {}
    if decl.drafter == "prompt_lookup":
        extra["prompt_lookup_num_tokens"] = setup.decode.k
    elif decl.drafter == "assisted":
        extra["assistant_model"] = _draft(name, setup)

    @torch.inference_mode()
    def run(prompt: list[int], max_new_tokens: int | None = None) -> Run:
        ids = torch.tensor([prompt], dtype=torch.long, device=setup.target.device)  # (1, P)
        with ForwardCounter(setup.target) as fc:
            t0 = time.perf_counter()
            out = setup.target.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens or setup.max_new_tokens, do_sample=False,
                eos_token_id=setup.stops,
                pad_token_id=setup.stops[0], **extra,
            )  # fmt: skip
            seconds = time.perf_counter() - t0
        return Run(truncate_at_eos(out[0, len(prompt) :].tolist(), setup.stops), seconds, fc.calls)

    return run


def _chain_loop(name: str, decl: MethodDecl, setup: Setup) -> Method:
    """Our speculative loop with a chain drafter, greedy or rejection-sampling verification."""
    drafter, k = make_drafter(name, setup)

    def run(prompt: list[int], max_new_tokens: int | None = None) -> Run:
        t0 = time.perf_counter()
        tokens, steps = speculative_generate(
            setup.target, prompt, drafter, max_new_tokens or setup.max_new_tokens, k,
            mode=setup.mode, eos_token_id=setup.stops, seed=derive(setup.seed, "verify"),
        )  # fmt: skip
        return run_of_steps(tokens, steps, time.perf_counter() - t0)

    return run


def _tree_loop(name: str, decl: MethodDecl, setup: Setup) -> Method:
    """A tree drafter's method, its tree verified in one target forward per step."""
    if setup.mode != "greedy":
        raise ValueError(f"{name} verifies greedily only (no rejection-sampling tree)")
    drafter = TREE_DRAFTERS[decl.drafter](name, decl, setup)

    def run(prompt: list[int], max_new_tokens: int | None = None) -> Run:
        t0 = time.perf_counter()
        budget = max_new_tokens or setup.max_new_tokens
        tokens, steps = tree_generate(setup.target, prompt, drafter, budget, setup.stops)
        return run_of_steps(tokens, steps, time.perf_counter() - t0)

    return run


def _llamacpp_loop(name: str, decl: MethodDecl, setup: Setup) -> Method:
    """llama.cpp's own greedy loop on the model's GGUF file (kvspec.ngram.llamacpp_peer)."""
    if setup.llama_cpp is None or setup.gguf is None:
        raise ValueError(f"{name} needs the llama_cpp build directory and the model's GGUF file")
    from kvspec.ngram.llamacpp_peer import llama_cpp_method

    lookup = setup.decode.k if decl.drafter == "prompt_lookup" else None
    return llama_cpp_method(setup.llama_cpp, setup.gguf, lookup=lookup,
                            max_new_tokens=setup.max_new_tokens, stops=setup.stops,
                            threads=torch.get_num_threads())  # fmt: skip


LOOPS: dict[str, Callable[[str, MethodDecl, Setup], Method]] = {
    "greedy": _greedy_loop, "hf": _hf_loop, "chain": _chain_loop, "tree": _tree_loop,
    "llamacpp": _llamacpp_loop,
}  # fmt: skip


# ---- chain drafters ---------------------------------------------------------------------------
def make_drafter(name: str, setup: Setup) -> tuple[Any, int]:
    """The chain drafter of method `name` and its draft depth."""
    decl = method(name)
    if decl.loop != "chain":
        raise ValueError(f"{name} is not a chain-drafting method (loop {decl.loop!r})")
    return CHAIN_DRAFTERS[decl.drafter](name, decl, setup)


def _draft_model(name: str, decl: MethodDecl, setup: Setup) -> tuple[Any, int]:
    drafter = DraftModelDrafter(_draft(name, setup), sample=setup.mode == "sample",
                                seed=derive(setup.seed, "draft"),
                                stop_below=setup.decode.draft_confidence)  # fmt: skip
    return drafter, setup.decode.draft_k


def _prompt_lookup(name: str, decl: MethodDecl, setup: Setup) -> tuple[Any, int]:
    lookup = PromptLookupDrafter()
    if not decl.adaptive:
        return lookup, setup.decode.k
    return _adaptive({"local": lookup}, setup, None), setup.decode.adaptive_k


def _infgram(name: str, decl: MethodDecl, setup: Setup) -> tuple[Any, int]:
    ngram = _ngram_drafter(name, decl, setup)
    if not decl.adaptive:
        return ngram, setup.decode.k
    rows = setup.calibrations.get(decl.index)
    return _adaptive({"index": ngram}, setup, rows), setup.decode.adaptive_k


def _hybrid(name: str, decl: MethodDecl, setup: Setup) -> tuple[Any, int]:
    """The request-local drafter and the index, the better expected draft each step (and the
    draft model where both expect little, for a method declaring that fallback)."""
    drafters = {"local": LOCAL_DRAFTERS[setup.decode.local](),
                "index": _ngram_drafter(name, decl, setup)}  # fmt: skip
    rows = setup.calibrations.get(decl.index)
    return _adaptive(drafters, setup, rows, _fallback(name, decl, setup)), setup.decode.adaptive_k


def _fallback(name: str, decl: MethodDecl, setup: Setup) -> Fallback | None:
    """The draft model as a hybrid's fallback (`spec.decode.adaptive.fallback`): greedy drafts
    that end below `draft_confidence`, reporting their top-1 probabilities for the cut."""
    if decl.fallback is None:
        return None
    model = DraftModelDrafter(_draft(name, setup), report_confidence=True,
                              stop_below=setup.decode.draft_confidence)  # fmt: skip
    return Fallback(model, setup.decode.fallback["gate"], setup.decode.fallback["k"])


# the hybrid's request-local part (spec.decode.adaptive.local)
LOCAL_DRAFTERS: dict[str, Callable[[], Any]] = {
    "suffix": RequestSuffixDrafter, "prompt_lookup": PromptLookupDrafter,
}  # fmt: skip


CHAIN_DRAFTERS = {"draft": _draft_model, "prompt_lookup": _prompt_lookup, "infgram": _infgram,
                  "hybrid": _hybrid}  # fmt: skip


def _draft(name: str, setup: Setup) -> torch.nn.Module:
    if setup.draft is None:
        raise ValueError(f"{name} needs a draft model")
    return setup.draft


def _ngram_drafter(name: str, decl: MethodDecl, setup: Setup) -> InfiniGramDrafter:
    """Greedy inf_nkt drafts from the opened index the method declares."""
    if decl.index not in setup.engines:
        raise ValueError(f"{name} needs the {decl.index!r} index; have {sorted(setup.engines)}")
    return InfiniGramDrafter(
        setup.engines[decl.index], confidence=setup.decode.confidence,
        min_match=setup.decode.min_match, sample=False, seed=derive(setup.seed, "draft"),
    )  # fmt: skip


def _adaptive(
    drafters: dict[str, Any], setup: Setup, rows: Any, fallback: Fallback | None = None
) -> AdaptiveDrafter:
    """An adaptive drafter, its index prior from acceptance rows when the model has them."""
    weight = setup.decode.prior_weight
    prior = Calibration.from_rows(rows, "index", weight) if rows is not None else None
    return AdaptiveDrafter(drafters, prior, threshold=setup.decode.threshold, fallback=fallback)


# ---- tree drafters ----------------------------------------------------------------------------
def _draft_tree(name: str, decl: MethodDecl, setup: Setup) -> Any:
    """EAGLE-2's dynamic tree grown by the draft model."""
    tree = setup.decode.tree
    return ModelTreeDrafter(_draft(name, setup), tree["depth"], tree["topk"], tree["total"])


def _hybrid_tree(name: str, decl: MethodDecl, setup: Setup) -> Any:
    """The request-local trie plus the index's chain; for an adaptive declaration, the
    adaptive hybrid's best cut draft and, when it pays, the runner-up's (two branches)."""
    if decl.adaptive:
        adaptive, k = _hybrid(name, decl, setup)
        return AdaptiveBranches(adaptive, k)
    settings = LocalTreeSettings.from_config(setup.decode.local_tree)
    return HybridTreeDrafter(_ngram_drafter(name, decl, setup), settings)


def _suffix_decoding(name: str, decl: MethodDecl, setup: Setup) -> Any:
    """Arctic Inference's suffix trees over the target-response corpus and the request; it
    decides its own depth, so it may draft as many tokens as our adaptive drafters."""
    if setup.arctic_suffix is None:
        raise ValueError(f"{name} needs the arctic_suffix build directory")
    from kvspec.ngram.suffix_peer import ArcticSuffixDrafter

    return ArcticSuffixDrafter(setup.arctic_suffix, setup.corpus, setup.decode.adaptive_k)


TREE_DRAFTERS = {"draft": _draft_tree, "hybrid": _hybrid_tree,
                 "suffix_decoding": _suffix_decoding}  # fmt: skip
