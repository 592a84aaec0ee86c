"""Target-response generation: batched greedy equals one-by-one greedy; sharding and resume."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from kvspec.decoding import generate as gen
from kvspec.decoding.loop import greedy_generate
from kvspec.models.tokenizer import train_tokenizer
from kvspec.ngram.prompts import index_prompts, is_python, select_prompts

NEW = 12


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    texts = ["def add(a, b):\n    return a + b\n", "The quick brown fox jumps over the dog."] * 50
    return train_tokenizer(texts, vocab_size=300, model_max_length=256)


@pytest.fixture(scope="module")
def model(tokenizer) -> LlamaForCausalLM:
    """Tiny random Llama in float64, so batched (padded) and single forwards agree on argmax."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    m = LlamaForCausalLM(config).double().eval()
    m.generation_config.eos_token_id = [tokenizer.eos_token_id]
    return m


@pytest.fixture(scope="module")
def prompts() -> list[dict]:
    words = ["alpha", "beta", "gamma", "delta", "fox", "dog", "add", "return"]
    return [
        {"id": f"p{i}", "prompt": " ".join(words[: 1 + i % 7]) * (1 + i % 3)} for i in range(10)
    ]


def _read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_batched_greedy_equals_one_by_one(model, tokenizer, prompts):
    ids = [gen.prompt_ids(tokenizer, p["prompt"]) for p in prompts]
    stops = gen.stop_ids(model, tokenizer)
    batched = gen.generate_batch(model, ids, NEW, tokenizer.pad_token_id, stops)
    for p, out in zip(ids, batched, strict=True):
        assert out == greedy_generate(model, p, NEW, stops)
    assert len({len(p) for p in ids}) > 1  # left padding was exercised


def test_sharded_output_equals_unsharded(model, tokenizer, prompts, tmp_path):
    gen.generate_shard(model, tokenizer, prompts, tmp_path / "all.jsonl", NEW, batch_size=4)
    shards = []
    for s in range(3):
        part = [prompts[i] for i in gen.shard_slice(len(prompts), 3, s)]
        shards.append(tmp_path / f"{s}.jsonl")
        gen.generate_shard(model, tokenizer, part, shards[-1], NEW, batch_size=3)
    gen.gather_shards(shards, tmp_path / "gathered.jsonl")
    whole, gathered = _read(tmp_path / "all.jsonl"), _read(tmp_path / "gathered.jsonl")
    assert [r["id"] for r in whole] == [p["id"] for p in prompts]
    assert whole == gathered
    assert all(r["response_ids"] and isinstance(r["response"], str) for r in whole)


def test_shard_slices_partition_the_items():
    for n, k in [(10, 3), (3, 5), (0, 2)]:
        covered = [i for s in range(k) for i in gen.shard_slice(n, k, s)]
        assert covered == list(range(n))
    with pytest.raises(ValueError, match="shard"):
        gen.shard_slice(10, 3, 3)


def test_resume_reuses_checkpointed_batches(model, tokenizer, prompts, tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt.jsonl"
    gen.generate_shard(model, tokenizer, prompts[:4], tmp_path / "first.jsonl", NEW, 2)
    ckpt.write_text((tmp_path / "first.jsonl").read_text() + '{"id": "p4", "trunc')  # torn tail
    calls = []
    real = gen.generate_batch
    monkeypatch.setattr(
        gen, "generate_batch", lambda m, ps, *a: calls.append(len(ps)) or real(m, ps, *a)
    )
    new = gen.generate_shard(
        model, tokenizer, prompts, tmp_path / "out.jsonl", NEW, 2, checkpoint=ckpt
    )
    assert new == len(prompts) - 4 and sum(calls) == len(prompts) - 4
    assert not ckpt.exists()  # removed once the shard file is complete
    monkeypatch.setattr(gen, "generate_batch", real)
    gen.generate_shard(model, tokenizer, prompts, tmp_path / "ref.jsonl", NEW, 2)
    assert _read(tmp_path / "out.jsonl") == _read(tmp_path / "ref.jsonl")


def test_gather_refuses_overlapping_shards(model, tokenizer, prompts, tmp_path):
    gen.generate_shard(model, tokenizer, prompts[:2], tmp_path / "a.jsonl", 2, 2)
    with pytest.raises(ValueError, match="overlap"):
        gen.gather_shards([tmp_path / "a.jsonl", tmp_path / "a.jsonl"], tmp_path / "g.jsonl")


def _sources() -> dict[str, list[dict]]:
    code = [
        {"id": str(i), "prompt": f"Write a Python function {i}", "response": "def f(): pass"}
        for i in range(30)
    ]
    chat = [
        {"id": str(i), "prompt": f"Tell me about topic {i}", "response": "A topic."}
        for i in range(50)
    ]
    return {"codealpaca": code, "alpaca": chat}


def test_heldout_sets_are_disjoint_and_never_indexed():
    heldout = {
        "general": {"sources": ["alpaca", "codealpaca"], "n": 10},
        "python": {"sources": ["codealpaca"], "n": 5, "python_only": True},
    }
    recs = select_prompts(_sources(), heldout, seed=0)
    splits = [r["split"] for r in recs]
    assert splits.count("general") == 10 and splits.count("python") == 5
    assert all(r["python"] for r in recs if r["split"] == "python")
    assert len({r["id"] for r in recs}) == len(recs) == 80
    index = index_prompts(recs, 1.0)
    assert len(index) == 65 and all(r["split"] == "index" for r in index)
    small, half = index_prompts(recs, 0.2), index_prompts(recs, 0.5)
    assert {r["id"] for r in small} < {r["id"] for r in half}  # nested sweep
    assert select_prompts(_sources(), heldout, seed=0) == recs  # seeded
    assert select_prompts(_sources(), heldout, seed=1) != recs


def test_a_repeated_prompt_text_enters_once_so_no_held_out_prompt_is_indexed():
    sources = _sources()
    # ShareGPT's identity chats repeat their first turn; whitespace differences do not count
    sources["sharegpt"] = [
        {
            "id": f"identity_{i}",
            "prompt": "What is up?" if i % 2 else " What  is\nup? ",
            "response": f"Hi {i}",
        }
        for i in range(40)
    ]
    sources["alpaca"] += [{"id": "dup", "prompt": "Tell me about topic 3", "response": "B."}]
    heldout = {"general": {"sources": ["alpaca", "codealpaca", "sharegpt"], "n": 40}}
    for seed in range(5):
        recs = select_prompts(sources, heldout, seed=seed)
        texts = [" ".join(r["prompt"].split()) for r in recs]
        assert len(texts) == len(set(texts)) == 30 + 50 + 1
        held = {t for t, r in zip(texts, recs, strict=True) if r["split"] == "general"}
        assert len(held) == 40 and not held & {
            t for t, r in zip(texts, recs, strict=True) if r["split"] == "index"
        }
    firsts = {r["id"]: r for r in select_prompts(sources, {}, seed=0)}
    assert "sharegpt/identity_0" in firsts and "sharegpt/identity_1" not in firsts
    assert "alpaca/3" in firsts and "alpaca/dup" not in firsts  # the first in source order


def test_heldout_too_large_is_a_clear_error():
    with pytest.raises(ValueError, match="python"):
        select_prompts(
            _sources(), {"python": {"sources": ["alpaca"], "n": 1, "python_only": True}}, 0
        )


def test_generation_prompts_take_heldout_and_a_nested_prefix():
    recs = select_prompts(_sources(), {"general": {"sources": ["alpaca"], "n": 4}}, seed=0)
    some = gen.generation_prompts(recs, 0.1)
    assert sum(r["split"] == "general" for r in some) == 4
    assert sum(r["split"] == "index" for r in some) == round(0.1 * 76)
    assert gen.generation_prompts(recs, 0.1, heldout=False) == [
        r for r in some if r["split"] == "index"
    ]


@pytest.mark.parametrize(
    ("prompt", "response", "expected"),
    [
        ("Write a python script to sort a list", "sorted(x)", True),
        ("Create a function that adds two numbers", "def add(a, b):\n    return a + b", True),
        ("Write a JavaScript function to add", "function add(a, b) { return a + b; }", False),
        ("Write a Java method", "import java.util.*;", False),
        ("Describe a cat", "Cats are mammals.", False),
    ],
)
def test_is_python(prompt, response, expected):
    assert is_python(prompt, response) is expected


def test_the_generation_stage_decodes_in_the_configured_engine(
    tokenizer, prompts, tmp_path, monkeypatch
):
    """`responses_stage`, as rule generate_responses calls it with `resources.linear: packed`:
    the model it generates with is packed, and batched, left-padded generation in the packed
    kernel gives each prompt the tokens greedy decoding one prompt at a time in that engine
    gives (the kernel is batch-invariant)."""
    from kvspec.data.records import write_jsonl
    from kvspec.decoding.packed import engine_of
    from kvspec.models.load import load_weights
    from kvspec.ngram import stages
    from kvspec.ngram.stages import responses_stage

    engines = []

    def spy(*args, **kwargs):
        model, tok = load_model(*args, **kwargs)
        engines.append(engine_of(model))
        return model, tok

    load_model = stages.load_model
    monkeypatch.setattr(stages, "load_model", spy)

    from ..tiny import tiny_llama

    model_dir = tmp_path / "model"
    tiny_llama(0, vocab=len(tokenizer), double=False, pad_token_id=tokenizer.pad_token_id,
               eos_token_id=tokenizer.eos_token_id).save_pretrained(model_dir)  # fmt: skip
    tokenizer.save_pretrained(model_dir)
    records = [{**p, "split": "index", "rank": i} for i, p in enumerate(prompts)]
    write_jsonl(tmp_path / "prompts.jsonl", records)
    out = tmp_path / "shard.jsonl"
    responses_stage(str(tmp_path / "prompts.jsonl"), str(model_dir), str(out), shard=0,
                    shards=1, fraction=1.0, heldout=False, max_new_tokens=NEW, batch_size=4,
                    device="cpu", dtype="float32", threads=1, linear="packed")  # fmt: skip
    assert engines == ["packed"]
    packed = load_weights(model_dir, linear="packed")
    stops = gen.stop_ids(packed, tokenizer)
    got = {r["id"]: r["response_ids"] for r in _read(out)}
    assert got.keys() == {p["id"] for p in prompts}
    for p in prompts:
        want = greedy_generate(packed, gen.prompt_ids(tokenizer, p["prompt"]), NEW, stops)
        assert got[p["id"]] == gen.trim_response(want, stops, tokenizer.pad_token_id), p["id"]


def test_vllm_generation_refuses_the_packed_engine(tmp_path):
    from kvspec.ngram.stages import responses_stage

    with pytest.raises(ValueError, match="runs its own kernels"):
        responses_stage(str(tmp_path / "none.jsonl"), str(tmp_path), str(tmp_path / "o.jsonl"),
                        shard=0, shards=1, fraction=1.0, heldout=False, max_new_tokens=4,
                        batch_size=4, device="cpu", dtype="float32", threads=1,
                        backend="vllm", linear="packed")  # fmt: skip
