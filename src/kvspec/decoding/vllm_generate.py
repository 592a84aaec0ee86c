"""Bulk greedy generation with vLLM, served by its own process in an environment that has vLLM
(`python -m kvspec.decoding.vllm_generate SETTINGS.json`).

It imports nothing of kvspec, so the vLLM environment needs only vLLM (its pins differ from the
study's; the Makefile's `vllm-env` target builds it). The settings name the model directory,
dtype, tensor-parallel size, context length and whether to run eagerly (no torch.compile); the
model loads once. Then each line on stdin is a request — a JSON file with the prompts (token
ids), the token budget, the stop ids and where to write the answer — and each answer is each
prompt's new token ids, stopped after a stop id (as the HF path's `generate_batch` returns
them); `KVSPEC-DONE <path>` on stdout says it is written.
"""

from __future__ import annotations

import json
import sys

DONE = "KVSPEC-DONE"


def answer(llm, request: dict) -> list[list[int]]:
    """Greedy continuations of `request["prompts"]`."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=request["max_new_tokens"],
                            stop_token_ids=request["stops"], detokenize=False)  # fmt: skip
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in request["prompts"]], params,
                           use_tqdm=False)  # fmt: skip
    return [list(o.outputs[0].token_ids) for o in outputs]


def serve(settings: dict) -> None:
    import torch
    from vllm import LLM

    # the share of device memory vLLM reserves for weights and KV cache; on the CPU backend it
    # is a share of the NUMA node's RAM, which the study's own process also needs
    memory = 0.9 if torch.cuda.is_available() else 0.3
    llm = LLM(model=settings["model"], dtype=settings["dtype"], seed=0,
              tensor_parallel_size=settings["tensor_parallel"],
              max_model_len=settings["max_model_len"],
              enforce_eager=settings.get("enforce_eager", False),
              gpu_memory_utilization=memory)  # fmt: skip
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        with open(path) as f:
            request = json.load(f)
        with open(request["out"], "w") as f:
            json.dump({"tokens": answer(llm, request)}, f)
        print(f"{DONE} {request['out']}", flush=True)


if __name__ == "__main__":  # vLLM's engine starts a subprocess by spawn: the guard is needed
    with open(sys.argv[1]) as f:
        serve(json.load(f))
