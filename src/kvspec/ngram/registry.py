"""The decoding methods of the speed benchmark, each declared once: which loop runs it, which
drafter feeds that loop, and the inputs it needs besides the target and the prompts.

No torch import, so the experiment plan reads it; `kvspec.ngram.methods` builds a method from
its declaration (never from its name).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodDecl:
    """One benchmark method.

    `loop`: "greedy" (our loop, one token per forward), "hf" (transformers' `generate`),
    "chain" (our speculative loop), "tree" (one tree-masked target forward per step; greedy
    verification only) or "llamacpp" (llama.cpp's own greedy loop on the model's GGUF).
    `drafter`: what proposes the drafts ("prompt_lookup", "draft",
    "infgram", "hybrid", "suffix_decoding") or, for "hf" and "llamacpp", the option ("greedy",
    "prompt_lookup", "assisted"). `index`: the infini-gram index it reads ("sft"/"target").
    `adaptive`: depth learnt while decoding (kvspec.ngram.adaptive), calibrated by the
    index's acceptance rows when the model has them. `fallback`: a costly drafter consulted
    only when the adaptive drafter's own drafts are weak ("draft": the draft model).
    """

    loop: str
    drafter: str | None = None
    index: str | None = None
    adaptive: bool = False
    inputs: tuple[str, ...] = ()
    fallback: str | None = None

    @property
    def greedy_only(self) -> bool:
        """No rejection-sampling variant ("@sample"): trees verify greedily."""
        return self.loop in ("greedy", "hf", "tree", "llamacpp")

    @property
    def learns(self) -> bool:
        """Keeps state between calls that changes its later runs: an adaptive drafter's
        acceptance and cost estimates, llama.cpp's cache of the previous call's tokens. The
        others (SuffixDecoding drops each request's response again) run a prompt alike
        whatever ran before (tested)."""
        return self.adaptive or self.loop == "llamacpp"


def _infgram(index: str, adaptive: bool = False) -> MethodDecl:
    calib = (f"calib_index_{index}",) if adaptive else ()
    return MethodDecl("chain", "infgram", index, adaptive, (f"index_{index}", *calib))


def _hybrid(
    index: str, tree: bool = False, branches: bool = False, draft: bool = False
) -> MethodDecl:
    if tree:  # the request-local trie plus the index's chain as one tree
        return MethodDecl("tree", "hybrid", index, False, (f"index_{index}",))
    inputs = (f"index_{index}", f"calib_index_{index}", *(("draft",) if draft else ()))
    return MethodDecl("tree" if branches else "chain", "hybrid", index, True, inputs,
                      "draft" if draft else None)  # fmt: skip


METHODS: dict[str, MethodDecl] = {
    "greedy": MethodDecl("greedy"),  # our loop, one token per forward (the baseline)
    "hf_greedy": MethodDecl("hf", "greedy"),  # transformers generate, greedy
    "hf_prompt_lookup": MethodDecl("hf", "prompt_lookup"),  # generate(prompt_lookup_num_tokens)
    "hf_assisted": MethodDecl("hf", "assisted", inputs=("draft",)),  # generate(assistant_model)
    "sd_prompt_lookup": MethodDecl("chain", "prompt_lookup"),  # HF's policy, our loop
    "sd_prompt_lookup_adaptive": MethodDecl("chain", "prompt_lookup", adaptive=True),
    "sd_draft": MethodDecl("chain", "draft", inputs=("draft",)),  # draft-model drafter
    # EAGLE-2's dynamic draft tree grown by the draft model (kvspec.decoding.tree)
    "sd_draft_tree": MethodDecl("tree", "draft", inputs=("draft",)),
    "sd_infgram_sft": _infgram("sft"),  # inf_nkt on the SFT-response index
    "sd_infgram_target": _infgram("target"),  # inf_nkt on the target-response index
    "sd_infgram_sft_adaptive": _infgram("sft", adaptive=True),
    "sd_infgram_target_adaptive": _infgram("target", adaptive=True),
    # request-local prompt lookup + index, adaptive, the better expected draft each step
    "sd_hybrid_sft": _hybrid("sft"),
    "sd_hybrid_target": _hybrid("target"),
    # the same, with the other drafter's cut draft verified beside it when that pays
    # (kvspec.ngram.adaptive.AdaptiveBranches: a two-branch tree)
    "sd_hybrid_sft_branches": _hybrid("sft", branches=True),
    "sd_hybrid_target_branches": _hybrid("target", branches=True),
    # the two branches, with the draft model drafting on the steps where the n-gram drafts
    # expect little (spec.decode.adaptive.fallback; beyond the thesis: its §4.6.6.2 direction)
    "sd_hybrid_target_draft": _hybrid("target", branches=True, draft=True),
    # every earlier continuation of the longest request-local match (a trie) plus the index's
    # chain, gated by match length (kvspec.ngram.local_tree)
    "sd_hybrid_sft_tree": _hybrid("sft", tree=True),
    "sd_hybrid_target_tree": _hybrid("target", tree=True),
    # Arctic Inference's SuffixDecoding (built from its source release) over the same target
    # responses as index_target plus the request itself
    "sd_suffix_decoding": MethodDecl(
        "tree", "suffix_decoding", inputs=("arctic_suffix", "responses")
    ),  # fmt: skip
    # llama.cpp (built from its source release) on the model's own GGUF file: what a CPU user
    # would run instead (kvspec.ngram.llamacpp_peer); a different engine, so not exact
    "llamacpp_greedy": MethodDecl("llamacpp", "greedy", inputs=("llama_cpp", "gguf")),
    "llamacpp_prompt_lookup": MethodDecl("llamacpp", "prompt_lookup", inputs=("llama_cpp", "gguf")),
}
METHOD_INPUTS: dict[str, tuple[str, ...]] = {name: d.inputs for name, d in METHODS.items()}
# which index each infini-gram method reads: (corpus, fraction) of results/ngram/<model>/
INDEX_OF = {"index_sft": ("sft", "1"), "index_target": ("responses", "1")}
# which acceptance rows calibrate an adaptive method: those of the index it drafts from
CALIBRATION_OF = {"calib_index_sft": "index_sft", "calib_index_target": "index_target"}


def method(name: str) -> MethodDecl:
    """The declaration of method `name`; a clear error for an unknown one."""
    if name not in METHODS:
        raise ValueError(f"unknown decoding method {name!r}; known: {tuple(METHODS)}")
    return METHODS[name]
