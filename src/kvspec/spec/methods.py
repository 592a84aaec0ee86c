"""The decoding methods of the speed benchmark and the inputs each needs (no torch import,
so the experiment plan can read it)."""

from __future__ import annotations

# method -> named inputs it needs besides the target model and the prompts
METHOD_INPUTS: dict[str, tuple[str, ...]] = {
    "greedy": (),  # our loop, one token per forward (the baseline)
    "hf_greedy": (),  # transformers generate, greedy
    "hf_prompt_lookup": (),  # transformers generate(prompt_lookup_num_tokens=k)
    "hf_assisted": ("draft",),  # transformers generate(assistant_model=draft)
    "sd_prompt_lookup": (),  # our loop, prompt-lookup drafter (HF's policy)
    "sd_prompt_lookup_adaptive": (),  # the same, adaptive depth (learnt while decoding)
    "sd_draft": ("draft",),  # our loop, draft-model drafter
    # EAGLE-2's dynamic draft tree grown by the draft model, one tree-masked target forward
    # per step (kvspec.spec.tree; greedy verification only)
    "sd_draft_tree": ("draft",),
    "sd_infgram_sft": ("index_sft",),  # our loop, inf_nkt on the SFT-response index
    "sd_infgram_target": ("index_target",),  # our loop, inf_nkt on the target-response index
    # adaptive depth, calibrated by the index's acceptance rows (when the model has them)
    "sd_infgram_sft_adaptive": ("index_sft", "calib_index_sft"),
    "sd_infgram_target_adaptive": ("index_target", "calib_index_target"),
    # request-local prompt lookup + index, adaptive, the better expected draft each step
    "sd_hybrid_sft": ("index_sft", "calib_index_sft"),
    "sd_hybrid_target": ("index_target", "calib_index_target"),
    # the hybrid as one draft tree: every earlier continuation of the longest request-local
    # match (a trie) plus the index's chain, gated by match length (kvspec.spec.local_tree)
    "sd_hybrid_sft_tree": ("index_sft",),
    "sd_hybrid_target_tree": ("index_target",),
    # Arctic Inference's SuffixDecoding (built from its source release) over the same
    # target responses as index_target plus the request itself; draft trees (greedy only)
    "sd_suffix_decoding": ("arctic_suffix", "responses"),
}
METHODS = tuple(METHOD_INPUTS)
GREEDY_ONLY = frozenset(
    {"sd_draft_tree", "sd_suffix_decoding", "sd_hybrid_sft_tree", "sd_hybrid_target_tree"}
)  # no rejection-sampling variant ("@sample")
# which index each infini-gram method reads: (corpus, fraction) of results/ngram/<model>/
INDEX_OF = {"index_sft": ("sft", "1"), "index_target": ("responses", "1")}
# which acceptance rows calibrate an adaptive method: those of the index it drafts from
CALIBRATION_OF = {"calib_index_sft": "index_sft", "calib_index_target": "index_target"}
