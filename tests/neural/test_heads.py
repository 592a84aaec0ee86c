"""Document 002's drafters as stage pieces: heads built from their declarations survive a
save/load round trip, and every head's chain and tree methods reproduce greedy decoding."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.bench import run_benchmark
from kvspec.decoding.bench_summary import summarize
from kvspec.decoding.loop import greedy_generate
from kvspec.neural.heads import build_head, load_head, neural_methods
from kvspec.ngram.methods import DecodeSettings, Setup

from ..second_device import on_device
from ..tiny import tiny_llama

DRAFTERS = {
    "ours": {"kind": "moa", "tli": 1, "lsa_intermediate": 16, "sa_intermediate": 16,
             "ca_intermediate": 32},
    "eagle": {"kind": "eagle"},
    "independent": {"kind": "independent", "layers": 1, "intermediate": 32},
}  # fmt: skip


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, layers=3)


def test_unknown_kind_is_an_error(target) -> None:
    with pytest.raises(ValueError, match="drafter kind must be one of"):
        build_head(target, {"kind": "medusa"})


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_a_saved_head_loads_with_its_weights(target, name, tmp_path) -> None:
    torch.manual_seed(3)
    head = build_head(target, DRAFTERS[name])
    path = tmp_path / f"{name}.pt"
    torch.save({"drafter": DRAFTERS[name], "state": head.state_dict()}, path)
    loaded, decl = load_head(path, target)
    assert decl == DRAFTERS[name] and not loaded.training
    for key, value in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


def test_every_chain_and_tree_method_is_greedy_decoding(target) -> None:
    torch.manual_seed(4)
    heads = {n: (build_head(target, d).eval(), d) for n, d in DRAFTERS.items()}
    setup = Setup(target, [], 12, DecodeSettings.defaults(k=4, draft_k=4))
    methods = neural_methods(setup, heads, 3, {"depth": 3, "topk": 2, "total": 5})
    assert sorted(methods) == sorted(f"{n}/{m}" for n in DRAFTERS for m in ("chain", "tree"))
    prompts = [("a", [3, 17, 5, 9, 21]), ("b", [5, 5, 5, 5])]
    for name, method in methods.items():
        for _, prompt in prompts:
            run = method(prompt)
            assert run.tokens == greedy_generate(target, prompt, 12), name
            assert (
                run.forwards == run.steps
                and run.drafted <= (5 if "tree" in name else 3) * run.steps
            )
            # the benchmark's short warm-up: one call's budget, greedy's first tokens
            assert method(prompt, 4).tokens == greedy_generate(target, prompt, 4), name


def test_tree_methods_are_summarised_beside_greedy(target) -> None:
    from kvspec.decoding.bench_summary import mark_divergence
    from kvspec.ngram.methods import build_method

    setup = Setup(target, [], 8, DecodeSettings.defaults(k=4, draft_k=4))
    heads = {"eagle": (build_head(target, DRAFTERS["eagle"]).eval(), DRAFTERS["eagle"])}
    methods = {"greedy": build_method("greedy", setup),
               **neural_methods(setup, heads, 2, {"depth": 2, "topk": 2, "total": 3})}  # fmt: skip
    prompts = [("a", [3, 17, 5])]
    records = run_benchmark(methods, prompts, baseline_repeats=2)
    mark_divergence(target, records, prompts)
    summary = summarize(records, unstable_spread=0.1)
    assert list(summary["method"]) == ["greedy", "eagle/chain", "eagle/tree"]
    assert (summary["exact_vs_greedy"] == 1.0).all()


SUBSET = list(range(0, 64, 3))  # a third of the tiny vocabulary


def _with_readout(target, decl):
    from kvspec.models.draft_vocab import frozen_readout

    head = build_head(target, decl).eval()
    head.readout = frozen_readout(target, SUBSET)
    return head


def test_heads_drafting_over_a_reduced_vocabulary_stay_greedy_decoding(target) -> None:
    torch.manual_seed(5)
    heads = {n: (_with_readout(target, d), d) for n, d in DRAFTERS.items()}
    setup = Setup(target, [], 12, DecodeSettings.defaults(k=4, draft_k=4))
    methods = neural_methods(setup, heads, 3, {"depth": 3, "topk": 2, "total": 5})
    for name, method in methods.items():
        for prompt in ([3, 17, 5, 9, 21], [5, 5, 5, 5]):
            assert method(prompt).tokens == greedy_generate(target, prompt, 12), name


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_a_reduced_head_drafts_only_its_tokens(target, name) -> None:
    from kvspec.decoding.loop import speculative_generate
    from kvspec.decoding.tree import tree_generate
    from kvspec.neural.heads import make_drafter

    torch.manual_seed(6)
    head = _with_readout(target, DRAFTERS[name])
    for tree in (None, {"depth": 3, "topk": 2, "total": 5}):
        drafter = make_drafter(DRAFTERS[name]["kind"], head, target, tree)
        method = "propose_tree" if tree else "propose"
        drafted = _record_drafts(drafter, method)
        if tree:
            tree_generate(target, [3, 17, 5, 9], drafter, 10, [])
        else:
            speculative_generate(target, [3, 17, 5, 9], drafter, 10, 3)
        assert drafted and set(drafted) <= set(SUBSET), (name, tree)


def _record_drafts(drafter, method: str) -> list[int]:
    """Wrap `drafter`'s `method` so every token it drafts lands in the returned list."""
    drafted: list[int] = []
    propose = getattr(drafter, method)

    def spy(context, k):
        out = propose(context, k)
        drafted.extend(out.tokens)
        return out

    setattr(drafter, method, spy)
    return drafted


def _stage_inputs(tmp_path) -> dict[str, str]:
    """A saved two-layer target (stop token 63) and eight index responses to train on."""
    import json

    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    model = tiny_llama(1, layers=2).float()
    model.generation_config.eos_token_id = 63
    model.save_pretrained(tmp_path / "target")
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0}, "a")))
    tok.save_pretrained(tmp_path / "target")
    records = [{"id": f"p{i}", "split": "index", "prompt_ids": [1, 2, 3],
                "response_ids": [7, 7, 7, 9, 9, 11 + i % 2]} for i in range(8)]  # fmt: skip
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"target": str(tmp_path / "target"), "responses": str(tmp_path / "r.jsonl")}


def _train_stage(
    inputs: dict[str, str],
    out: str,
    states: str,
    drafter: dict | None = None,
    device: str = "cpu",
    **data: object,
) -> None:
    from kvspec.neural.heads import head_train_stage

    head_train_stage(
        inputs, out, drafter=drafter or {"kind": "eagle"},
        train={"steps": 2, "batch_size": 2, "lr": 1e-3, "warmup_steps": 0, "eval_every": 1,
               "ckpt_every": 1},
        data={"max_len": 16, "val_fraction": 0.25, "state_cache": states, "cache_states": True,
              "state_depth": 1, "state_dtype": "bfloat16", "vocab": 4, **data},
        loss={"lambda_kl": 0.1, "lambda_reg": 1.0, "periods": [5, 15]},
        device=device, dtype="float32", seed=0, threads=1,
    )  # fmt: skip


def test_the_training_stage_saves_the_readout_and_loading_rebuilds_it(
    tmp_path, monkeypatch
) -> None:
    import kvspec.neural.head_train as head_train
    from kvspec.models.load import load_model
    from kvspec.neural.heads import head_stats

    inputs = _stage_inputs(tmp_path)
    out = tmp_path / "head.pt"
    trained_over = []  # the readout the head trained over: the one it is saved with
    real = head_train.train_head
    monkeypatch.setattr(head_train, "train_head", lambda *a, readout=None, **k: (
        trained_over.append(readout), real(*a, readout=readout, **k))[1])  # fmt: skip
    _train_stage(inputs, str(out), str(tmp_path / "states"))
    saved = torch.load(out, weights_only=False)
    # the three most frequent response tokens of the training split (7, 9 and 11 or 12
    # by its draw) and the stop token
    assert len(saved["readout"]) == 4 and {7, 9, 63} <= set(saved["readout"])
    assert head_stats(out)["draft_vocab"] == 4
    target, _ = load_model(inputs["target"], dtype="float32", device="cpu")
    head, _ = load_head(out, target)
    rows = target.lm_head.weight[saved["readout"]]
    torch.testing.assert_close(trained_over[0].weight, rows, rtol=0, atol=0)
    assert head.readout.ids.tolist() == saved["readout"]
    torch.testing.assert_close(head.readout.weight, target.lm_head.weight[head.readout.ids])
    assert not any(p.requires_grad for p in head.readout.parameters())
    # the ranking saved beside it cuts any other vocabulary (a sweep) or none
    two, _ = load_head(out, target, vocab=2)
    assert two.readout.ids.tolist() == [7, 63]
    full, _ = load_head(out, target, vocab=None)
    assert getattr(full, "readout", None) is None


def test_a_stage_without_the_state_cache_trains_the_same_head_and_stores_nothing(
    tmp_path,
) -> None:
    """moa.data.cache_states false (the paper scale) runs the target in every step instead of
    reading stored states: same head, bit for bit, and no states on disk."""
    from kvspec.neural.heads import head_stats

    inputs = _stage_inputs(tmp_path)
    _train_stage(inputs, str(tmp_path / "cached.pt"), str(tmp_path / "a"))
    _train_stage(inputs, str(tmp_path / "bare.pt"), str(tmp_path / "b"), cache_states=False)
    cached, bare = (torch.load(tmp_path / n, weights_only=False) for n in ("cached.pt", "bare.pt"))
    assert cached["state"].keys() == bare["state"].keys()
    for name, value in cached["state"].items():
        torch.testing.assert_close(bare["state"][name], value, rtol=0, atol=0)
    assert [r["val_loss"] for r in cached["curve"]] == [r["val_loss"] for r in bare["curve"]]
    assert any((tmp_path / "a").rglob("*.pt")) and not (tmp_path / "b").exists()
    stats = head_stats(tmp_path / "bare.pt")["state_cache"]
    assert stats["stored"] is False and stats["hits"] == 0 and stats["misses"] > 0
    assert head_stats(tmp_path / "cached.pt")["state_cache"]["hits"] > 0


def test_a_vocabulary_sweep_names_its_methods_and_stays_greedy(target, tmp_path) -> None:
    from kvspec.neural.heads import vocab_sweep_methods

    torch.manual_seed(7)
    head = build_head(target, DRAFTERS["eagle"])
    order = torch.arange(63, -1, -1, dtype=torch.int32)  # a ranking: high ids first
    path = tmp_path / "eagle.pt"
    torch.save({"drafter": DRAFTERS["eagle"], "state": head.state_dict(), "readout": None,
                "order": order}, path)  # fmt: skip
    setup = Setup(target, [], 10, DecodeSettings.defaults(k=4, draft_k=4))
    tree = {"depth": 3, "topk": 2, "total": 5}
    methods = vocab_sweep_methods(setup, str(path), "eagle", [8, None], 3, tree)
    assert sorted(methods) == ["eagle/tree/vocab8", "eagle/tree/vocabfull"]
    for method in methods.values():
        assert method([3, 17, 5, 9]).tokens == greedy_generate(target, [3, 17, 5, 9], 10)
    with pytest.raises(ValueError, match="no token ranking"):
        torch.save({"drafter": DRAFTERS["eagle"], "state": head.state_dict()}, path)
        load_head(path, target, vocab=8)


def test_heads_of_a_packed_target_are_packed_and_every_method_is_greedy(tmp_path) -> None:
    """The decode engine reaches the heads: a head loaded for a target loaded with
    `resources.linear: packed` computes through the same kernel (its layers and its readout),
    and its chain and tree drafts still reproduce that target's greedy decoding."""
    from kvspec.decoding.packed import engine_of, pack_linears

    target = pack_linears(tiny_llama(0, layers=3, double=False), "packed")
    setup = Setup(target, [], 12, DecodeSettings.defaults(k=4, draft_k=4))
    heads = {}
    for name, decl in DRAFTERS.items():
        torch.manual_seed(5)
        path = tmp_path / f"{name}.pt"
        torch.save({"drafter": decl, "state": build_head(target, decl).state_dict(),
                    "readout": torch.tensor(SUBSET)}, path)  # fmt: skip
        head, _ = load_head(path, target)
        own = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
        assert engine_of(head) == "packed" and all("forward" in vars(m) for m in own), name
        assert "reduced" in vars(head.readout), name
        heads[name] = (head, decl)
    methods = neural_methods(setup, heads, 3, {"depth": 3, "topk": 2, "total": 5})
    for name, method in methods.items():
        for prompt in ([3, 17, 5, 9, 21], [5, 5, 5, 5]):
            assert method(prompt).tokens == greedy_generate(target, prompt, 12), name


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_the_training_stage_trains_on_a_model_s_device_the_head_it_trains_on_the_cpu(
    name, tmp_path, second_device
) -> None:
    """The paper scale trains heads on GPUs: on a second device (tests/second_device.py),
    every tensor the stage builds beside the target goes to the target's device, the state
    cache is written and read back there, and the head, its checkpoint and its states reach
    the disk from the CPU; the head equals the one trained on the CPU."""
    inputs = _stage_inputs(tmp_path)
    for device in ("cpu", second_device):
        _train_stage(inputs, str(tmp_path / f"{device}.pt"), str(tmp_path / device),
                     DRAFTERS[name], device)  # fmt: skip
    on_cpu, moved = (torch.load(tmp_path / f"{d}.pt", weights_only=False)
                     for d in ("cpu", second_device))  # fmt: skip
    assert on_device(moved) == {"cpu"}
    assert moved["stats"]["state_cache"]["hits"] > 0  # states written, then read back
    for key, value in on_cpu["state"].items():
        torch.testing.assert_close(moved["state"][key], value, rtol=1e-4, atol=1e-5)
    for a, b in zip(on_cpu["curve"], moved["curve"], strict=True):
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-4)


def test_every_method_drafts_on_a_model_s_device_and_stays_greedy_decoding(
    second_device,
) -> None:
    """The benchmark's chain and tree methods of every head with the target and the heads on
    a second device: the tokens of greedy decoding on the CPU."""
    reference = tiny_llama(0, layers=3)
    target = tiny_llama(0, layers=3).to(second_device)
    torch.manual_seed(4)
    heads = {n: (build_head(target, d).to(second_device).eval(), d) for n, d in DRAFTERS.items()}
    setup = Setup(target, [], 6, DecodeSettings.defaults(k=4, draft_k=4))
    methods = neural_methods(setup, heads, 2, {"depth": 2, "topk": 2, "total": 3})
    prompt = [3, 17, 5, 9, 21]
    expected = greedy_generate(reference, prompt, 6)
    assert greedy_generate(target, prompt, 6) == expected
    for name, method in methods.items():
        assert method(prompt).tokens == expected, name
