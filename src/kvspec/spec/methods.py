"""The decoding methods of the speed benchmark and the inputs each needs (no torch import,
so the experiment plan can read it)."""

from __future__ import annotations

# method -> named inputs it needs besides the target model and the prompts
METHOD_INPUTS: dict[str, tuple[str, ...]] = {
    "greedy": (),  # our loop, one token per forward (the baseline)
    "hf_greedy": (),  # transformers generate, greedy
    "hf_prompt_lookup": (),  # transformers generate(prompt_lookup_num_tokens=k)
    "hf_assisted": ("draft",),  # transformers generate(assistant_model=draft)
    "sd_prompt_lookup": (),  # our loop, prompt-lookup drafter
    "sd_draft": ("draft",),  # our loop, draft-model drafter
    "sd_infgram_sft": ("index_sft",),  # our loop, inf_nkt on the SFT-response index
    "sd_infgram_target": ("index_target",),  # our loop, inf_nkt on the target-response index
}
METHODS = tuple(METHOD_INPUTS)
# which index each infini-gram method reads: (corpus, fraction) of results/ngram/<model>/
INDEX_OF = {"index_sft": ("sft", "1"), "index_target": ("responses", "1")}
