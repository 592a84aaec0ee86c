"""Head training data parallel over processes (as on a node's GPUs; gloo on CPU here) trains
the head one process trains: the same curve and the same weights, through the stage entry
point the rule calls (`head_train_stage`)."""

from __future__ import annotations

import json

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.neural.heads import head_train_stage
from tests.tiny import tree_llama


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    base = tmp_path_factory.mktemp("dp")
    target = tree_llama(0, layers=3).float()
    target.save_pretrained(base / "target")
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0}, "a")))
    tok.save_pretrained(base / "target")
    records = []
    for i in range(12):
        prompt = torch.randint(0, 48, (5,), generator=torch.Generator().manual_seed(i)).tolist()
        records.append({"id": f"p{i}", "split": "index", "prompt_ids": prompt,
                        "response_ids": greedy_generate(target, prompt, 16)})  # fmt: skip
    (base / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"target": str(base / "target"), "responses": str(base / "responses.jsonl")}


def _train(inputs, tmp_path, kind: str, processes: int) -> dict:
    out = tmp_path / f"{kind}-{processes}.pt"
    decl = {"kind": kind, "tli": 0, "lsa_intermediate": 16, "sa_intermediate": 16,
            "ca_intermediate": 32} if kind == "moa" else {"kind": kind}  # fmt: skip
    head_train_stage(
        inputs, str(out), drafter=decl,
        train={"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 1, "eval_every": 3,
               "ckpt_every": 3},
        data={"max_len": 32, "val_fraction": 0.25, "state_cache": str(tmp_path / "states"),
              "cache_states": True, "state_depth": 3, "state_dtype": "float32"},
        loss={"lambda_kl": 0.1, "lambda_reg": 1.0, "periods": [5, 15]},
        device="cpu", dtype="float32", seed=0, threads=2, processes=processes,
    )  # fmt: skip
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("kind", ["moa", "eagle"])
def test_two_processes_train_the_head_one_process_trains(inputs, tmp_path, kind) -> None:
    one, two = _train(inputs, tmp_path, kind, 1), _train(inputs, tmp_path, kind, 2)
    assert (one["stats"]["processes"], two["stats"]["processes"]) == (1, 2)
    measured = [k for k in one["curve"][0] if k != "seconds"]
    for a, b in zip(one["curve"], two["curve"], strict=True):
        for key in measured:  # float sums in another order: equal to rounding
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    for name, weight in one["state"].items():
        torch.testing.assert_close(two["state"][name], weight, rtol=1e-4, atol=1e-6)
