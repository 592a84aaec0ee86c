"""A healed MLA target with infini-gram drafting at long contexts (kvspec.ngram.mla_speed): the
history prompts, and through the rule's stage every run equal to its own model's greedy
decoding from one shared prefill, on a GQA model and its absorbed DeepSeek-V3 restoration."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kvspec.care.restore import RestoreSpec, restore_model
from kvspec.config import schema_defaults
from kvspec.decoding.loop import greedy_generate, prefill, speculative_generate
from kvspec.models.build import build_model
from kvspec.models.deepseek_absorbed import absorb
from kvspec.models.load import load_model
from kvspec.models.tokenizer import train_tokenizer
from kvspec.ngram.index import build_index
from kvspec.ngram.mla_speed import (
    NoDrafter,
    history_prompt,
    history_turns,
    long_prompts,
    mla_speed_stage,
)

TEXT = "def add(a, b): return a + b. the quick brown fox jumps over the lazy dog. " * 4
ARCH = {"family": "llama", "hidden": 64, "intermediate": 96, "layers": 2, "heads": 4,
        "kv_heads": 2, "max_position": 256}  # fmt: skip
CONTEXTS, NEW = [60, 120], 10


def test_history_prompt_is_cut_on_the_left_to_the_context() -> None:
    turns = [[1] * 5, [2] * 5, [3] * 5]
    ids = history_prompt([9, 9], turns, 9, np.array([2, 0, 1]))
    assert ids == [3] * 2 + [1] * 5 + [9, 9]  # turn 2, then turn 0, cut to 7 history tokens
    assert history_prompt([9], turns, 1, np.arange(3)) == [9]


def test_history_prompt_refuses_what_cannot_be_filled() -> None:
    with pytest.raises(ValueError, match="exceeds the context 3"):
        history_prompt([1, 2, 3, 4], [[5]], 3, np.arange(1))
    with pytest.raises(ValueError, match="hold 2 tokens; context 10 needs 9"):
        history_prompt([1], [[5], [6]], 10, np.arange(2))


def test_history_turns_are_answered_index_prompts() -> None:
    records = [
        {"split": "index", "prompt_ids": [1, 2], "response_ids": [3]},
        {"split": "general", "prompt_ids": [4], "response_ids": [5]},
        {"split": "index", "prompt_ids": [6], "response_ids": []},
    ]
    assert history_turns(records) == [[1, 2, 3]]
    with pytest.raises(ValueError, match="no answered index prompt"):
        history_turns(records[1:])


def test_each_question_has_its_own_seeded_history() -> None:
    turns = [[i] * 3 for i in range(20)]
    prompts = long_prompts([("a", [99]), ("b", [98])], turns, [10, 30], seed=1)
    assert [len(ids) for c in (10, 30) for _, ids in prompts[c]] == [10, 10, 30, 30]
    assert prompts[10][0][1] != prompts[10][1][1]  # different streams per question
    assert prompts == long_prompts([("a", [99]), ("b", [98])], turns, [10, 30], seed=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """What the rule reads: a tiny GQA Llama, its restored DeepSeek-V3 model, HumanEval-style
    questions, the GQA model's own answers (greedy) and an index over them."""
    root = tmp_path_factory.mktemp("mla_speed")
    tok = train_tokenizer([TEXT] * 20, 300, 128)
    gqa = build_model(ARCH, tok, seed=0)
    covs = [torch.eye(64, dtype=torch.float64)] * 2
    mla = restore_model(gqa, covs, RestoreSpec("transmla", kv_lora_rank=8, freqfold=2))
    for name, model in (("gqa", gqa), ("mla", mla)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    gqa64 = gqa.double().eval()
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        prompt = rng.integers(5, 290, 8).tolist()
        answer = greedy_generate(gqa64, prompt, 12)
        records.append({"id": f"r{i}", "split": "index", "prompt_ids": prompt,
                        "response_ids": answer})  # fmt: skip
    (root / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    questions = [{"task_id": f"t{i}", "prompt": f"def f{i}(x):"} for i in range(2)]
    (root / "humaneval.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    docs = [r["prompt_ids"] + r["response_ids"] for r in records]
    build_index(docs, root / "index", vocab_size=len(tok), eos_token_id=tok.eos_token_id)
    (root / "index.json").write_text(
        json.dumps({"vocab_size": len(tok), "eos_token_id": tok.eos_token_id})
    )
    names = {"model": "gqa", "mla": "mla", "prompts": "humaneval.jsonl",
             "responses": "responses.jsonl", "index_target": "index",
             "index_target_stats": "index.json"}  # fmt: skip
    return {key: str(root / name) for key, name in names.items()}


def _stage(files: dict[str, str], out: Path, methods: list[str], **kw) -> dict:
    bench = {"name": "humaneval", "prompts": "humaneval", "kind": "code", "n": 2}
    decode = schema_defaults("spec", "decode") | {"k": 4, "confidence": 0.0, "min_match": 1}
    mla_speed_stage(files, str(out), models={"GQA": "model", "MLA": "mla"}, methods=methods,
                    bench=bench, contexts=kw.get("contexts", CONTEXTS), max_new_tokens=NEW,
                    decode=decode, max_support=100, seed=3, dtype="float64")  # fmt: skip
    return json.loads(out.read_text())


def test_every_run_equals_its_models_greedy_decoding(files, tmp_path: Path) -> None:
    record = _stage(files, tmp_path / "runs.json", ["sd_infgram_target", "sd_prompt_lookup"])
    rows = record["rows"]
    keys = {(r["model"], r["context"], r["prompt"], r["method"]) for r in rows}
    methods = ("greedy", "sd_infgram_target", "sd_prompt_lookup")
    assert keys == {(m, c, p, x) for m in ("GQA", "MLA") for c in CONTEXTS
                    for p in ("t0", "t1") for x in methods}  # fmt: skip
    assert all(r["exact"] for r in rows)
    assert {r["model"]: r["absorbed"] for r in rows} == {"GQA": False, "MLA": True}
    # the shared prefill's greedy run is plain greedy decoding of a fresh cache
    models = {"GQA": load_model(files["model"], dtype="float64")[0],
              "MLA": load_model(files["mla"], dtype="float64")[0]}  # fmt: skip
    absorb(models["MLA"])
    for row in rows:
        if row["method"] == "greedy" and row["context"] == CONTEXTS[0]:
            prompt = _prompt_of(files, row)
            want = greedy_generate(models[row["model"]], prompt, NEW, record_stops(files))
            assert row["tokens"] == want and len(prompt) == row["prompt_len"] == CONTEXTS[0]
    drafted = [r for r in rows if r["method"] == "sd_infgram_target"]
    assert sum(r["accepted"] for r in drafted) > 0  # the index drafts the models' own text
    cache = {r["model"]: r["cache_bytes_per_token"] for r in rows}
    assert cache["GQA"] == 2 * 2 * 32 * 8  # K and V of 2 KV heads x 16, 2 layers, float64
    assert cache["MLA"] == 2 * (8 + 8) * 8  # latent 8 + RoPE key 16/2 per layer
    gqa_greedy = [r for r in rows if r["model"] == "GQA" and r["method"] == "greedy"]
    assert all(r["prefix_share"] == 1.0 for r in gqa_greedy)
    assert record["settings"]["contexts"] == CONTEXTS and record["config_hash"]


def _prompt_of(files: dict[str, str], row: dict) -> list[int]:
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.models.load import load_model as load

    _, tok = load(files["model"])
    bench = {"name": "humaneval", "prompts": "humaneval", "kind": "code", "n": 2}
    questions = bench_prompts(read_jsonl(files["prompts"]), bench, tok)
    turns = history_turns(read_jsonl(files["responses"]))
    prompts = long_prompts(questions, turns, [row["context"]], 3)
    return dict(prompts[row["context"]])[row["prompt"]]


def record_stops(files: dict[str, str]) -> list[int]:
    from kvspec.decoding.generate import stop_ids

    model, tok = load_model(files["model"])
    return stop_ids(model, tok)


def test_a_context_beyond_the_models_positions_is_refused(files, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_position_embeddings 256.*spec.mla_target"):
        _stage(files, tmp_path / "x.json", ["sd_prompt_lookup"], contexts=[250])


def test_a_prefilled_cache_must_hold_the_prompt_minus_its_last_token(files) -> None:
    model, _ = load_model(files["model"], dtype="float64")
    cache = prefill(model, [5, 6, 7, 8])
    with pytest.raises(ValueError, match="holds 3 positions; the prompt minus its last token is 4"):
        speculative_generate(model, [5, 6, 7, 8, 9], NoDrafter(), 4, 1, prefilled=cache)
