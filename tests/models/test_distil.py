"""Distillation of draft models: the loss, the loop (learning, resume), the data it may read,
and the stage's files (tiny seeded teacher and students)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from kvspec.care.heal import kd_loss
from kvspec.models import distil
from kvspec.models.distil import (
    DistilSpec,
    build_student,
    distil_loss,
    distil_sequences,
    distil_train,
    make_batch,
    principal_projection,
    split_sequences,
    teacher_targets,
    topk_kl,
)
from kvspec.models.packing import shared_length

from .distil_data import HELD_OUT_TOKEN, VOCAB, stage_teacher

ARCH = {"family": "llama", "hidden": 16, "intermediate": 32, "layers": 1, "heads": 2,
        "kv_heads": 1, "max_position": 64, "tie_embeddings": True}  # fmt: skip
DECL = {
    "teacher": "target",
    "arch": ARCH,
    "init": "pca",
    "train": {"steps": 12, "batch_size": 4, "lr": 1e-2, "warmup_steps": 2, "beta": 1.0,
              "tau": 1.0, "top_k": 8, "eval_every": 4, "ckpt_every": 4, "min_lr_ratio": 0.1,
              "weight_decay": 0.0, "grad_clip": 1.0},
    "data": {"val_fraction": 0.2, "max_len": 40, "prompt_loss": False, "teacher_batch": 4,
             "teacher_dtype": "float32"},
}  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Milliseconds-sized ops: one thread is faster than two fighting a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def spec(**kw) -> DistilSpec:
    return DistilSpec.from_config({**DECL["train"], **kw}, seed=0)


# ---------------------------------------------------------------- data


def test_sequences_learn_only_the_response_of_index_records(records, seqs) -> None:
    index = [r for r in records if r["split"] == "index"]
    assert [s.id for s in seqs] == [r["id"] for r in index]
    first = index[0]
    assert seqs[0].ids == tuple(first["prompt_ids"] + first["response_ids"])
    assert seqs[0].start == len(first["prompt_ids"]) - 1  # predicts the first response token
    batch = make_batch(seqs[:3])
    assert batch.labels.tolist() == [t for r in index[:3] for t in r["response_ids"]]
    with_prompt = distil_sequences(records, max_len=6, prompt_loss=True)
    assert all(len(s.ids) <= 6 and s.start == 0 for s in with_prompt)


def test_split_is_seeded_disjoint_and_complete(seqs) -> None:
    train, val = split_sequences(seqs, 0.2, seed=0)
    assert (
        len(val) == round(0.2 * len(seqs)) and {s.id for s in train} & {s.id for s in val} == set()
    )
    assert len(train) + len(val) == len(seqs)
    assert split_sequences(seqs, 0.2, seed=0) == (train, val)
    assert split_sequences(seqs, 0.2, seed=1)[1] != val
    assert split_sequences(seqs, 0.0, seed=0) == (seqs, [])


def test_held_out_prompts_never_enter_training(teacher, records, monkeypatch) -> None:
    seen: list[torch.Tensor] = []
    real = distil.make_batch
    monkeypatch.setattr(
        distil, "make_batch", lambda s, pad=0: seen.append(real(s, pad).ids) or real(s, pad)
    )
    distil.distil_model(teacher, records, DECL, seed=0)
    assert seen and all(not (ids == HELD_OUT_TOKEN).any() for ids in seen)  # teacher, train, val


# ---------------------------------------------------------------- loss


def _plain_logits(model, seqs) -> torch.Tensor:
    """(N, V) the model's own forward of each sequence alone, at its learned positions."""
    rows = [model(input_ids=torch.tensor([s.ids])).logits[0, s.start : len(s.ids) - 1]
            for s in seqs]  # fmt: skip
    return torch.cat(rows)


def test_loss_is_ce_when_beta_is_zero(teacher, seqs) -> None:
    student = build_student(ARCH, teacher, seed=0, init="random")
    batch = make_batch(seqs[:4])
    loss, ce, kl = distil_loss(student, batch, None, spec(beta=0.0))
    with torch.no_grad():
        logits = _plain_logits(student, seqs[:4])  # (N, V) the plain forward
    want = float(F.cross_entropy(logits, batch.labels))
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)
    assert kl == 0.0 and ce == pytest.approx(float(loss.detach()))


def test_kl_is_zero_when_the_student_is_the_teacher(teacher, seqs) -> None:
    with torch.no_grad():
        logits = _plain_logits(teacher, seqs[:4])  # (N, V)
    for k in (3, VOCAB):
        targets, agreement = teacher_targets(teacher, seqs[:4], top_k=k, tau=2.0, batch_size=2)
        assert agreement == 1.0  # its own greedy responses
        cat = distil.batch_targets(targets, seqs[:4])
        assert float(topk_kl(logits, cat, tau=2.0)) == pytest.approx(0.0, abs=1e-6)


def test_teacher_pass_over_a_shared_prefix_equals_each_sequence_alone(teacher, seqs) -> None:
    """Sequences that begin with the same 10 tokens (a chat template's system turn): batched,
    the prefix is computed once (`packing.shared_length`); alone, each computes its own."""
    head = list(seqs[0].ids[:10])
    same = [distil.Sequence(f"p{i}", tuple(head + list(s.ids)), s.start + 10)
            for i, s in enumerate(seqs[:4])]  # fmt: skip
    assert shared_length(same) == 10
    batched, _ = teacher_targets(teacher, same, top_k=8, tau=1.0, batch_size=4)
    alone, _ = teacher_targets(teacher, same, top_k=8, tau=1.0, batch_size=1)
    for key, (ids, logp, rest) in alone.items():
        got_ids, got_logp, got_rest = batched[key]
        assert torch.equal(got_ids, ids)
        torch.testing.assert_close(got_logp, logp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_rest, rest, rtol=1e-5, atol=1e-5)


def test_bfloat16_teacher_pass_is_close_and_cached_apart(teacher, seqs, tmp_path) -> None:
    """The autocast teacher pass leaves the teacher's weights as they were, its sorted top-k
    log-probs are within bfloat16 round-off of float32's (ids may swap on near-ties of this
    tiny near-uniform teacher), and the cache never hands one dtype's targets to the other."""
    spec = DistilSpec.from_config(DECL["train"], seed=0)
    exact, _, _ = distil.cached_teacher_targets(teacher, seqs[:4], spec, batch_size=2,
                                                cache_dir=tmp_path)  # fmt: skip
    weights = [p.clone() for p in teacher.parameters()]
    half, _, _ = distil.cached_teacher_targets(teacher, seqs[:4], spec, batch_size=2,
                                               cache_dir=tmp_path, dtype="bfloat16")  # fmt: skip
    assert len(list(tmp_path.glob("*.pt"))) == 2
    assert all(torch.equal(a, b) for a, b in zip(weights, teacher.parameters(), strict=True))
    assert next(teacher.parameters()).dtype == torch.float32
    for key in exact:
        (want_ids, want_lp, _), (got_ids, got_lp, _) = exact[key], half[key]
        assert float((want_ids[:, 0] == got_ids[:, 0]).float().mean()) >= 0.75
        assert not torch.equal(want_lp, got_lp)  # computed in bfloat16, not read from the cache
        torch.testing.assert_close(got_lp, want_lp, atol=0.05, rtol=0)


def test_the_teacher_cache_holds_across_load_paths_not_across_teachers(
    teacher, seqs, tmp_path, monkeypatch
) -> None:
    """The same teacher saved at two paths shares one cached pass (its config records where
    it was loaded from); a teacher with another config, or the same config and other weights,
    gets a pass of its own."""
    from transformers import AutoModelForCausalLM

    spec = DistilSpec.from_config(DECL["train"], seed=0)
    for name in ("a", "b"):
        teacher.save_pretrained(tmp_path / name)
    first, second = (AutoModelForCausalLM.from_pretrained(tmp_path / n) for n in ("a", "b"))
    assert first.config._name_or_path != second.config._name_or_path
    cache = tmp_path / "cache"
    want, _, _ = distil.cached_teacher_targets(first, seqs[:3], spec, batch_size=2, cache_dir=cache)
    calls = []
    real = distil.teacher_targets
    monkeypatch.setattr(distil, "teacher_targets", lambda *a, **k: calls.append(1) or real(*a, **k))
    got, _, _ = distil.cached_teacher_targets(second, seqs[:3], spec, batch_size=2, cache_dir=cache)
    assert not calls and len(list(cache.glob("*.pt"))) == 1
    assert all(torch.equal(want[k][1], got[k][1]) for k in want)
    second.config.rms_norm_eps *= 2
    distil.cached_teacher_targets(second, seqs[:3], spec, batch_size=2, cache_dir=cache)
    assert calls == [1] and len(list(cache.glob("*.pt"))) == 2
    with torch.no_grad():
        first.model.norm.weight[0] += 0.5  # same config, another model
    other, _, _ = distil.cached_teacher_targets(first, seqs[:3], spec, batch_size=2,
                                                cache_dir=cache)  # fmt: skip
    assert calls == [1, 1] and len(list(cache.glob("*.pt"))) == 3
    assert any(not torch.equal(want[k][1], other[k][1]) for k in want)


def test_teacher_top_k_is_the_log_softmax_reference() -> None:
    """The teacher pass's top-k equals log_softmax -> topk -> logsumexp of the rest (to float32
    rounding; its input is overwritten, so each call takes a copy), on rows
    so peaked that e^(log p) of the rest underflows in float32 (the shift must be kept) and at
    τ ≠ 1; at full k the rest is empty."""
    torch.manual_seed(0)
    logits = torch.randn(40, 300) * 3
    logits[:10, 7] += 130.0  # the other 299 tokens share ~e^-120 of the mass
    for tau in (1.0, 2.0):
        ids, values, rest = distil._topk(logits.clone(), 16, tau)
        logp = F.log_softmax(logits / tau, dim=-1)
        top = logp.topk(16, dim=-1)
        want = torch.logsumexp(logp.scatter(-1, top.indices, float("-inf")), dim=-1)
        assert torch.equal(ids, top.indices)
        torch.testing.assert_close(values, top.values, rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(rest, want, rtol=1e-6, atol=1e-5)
        assert float(rest[:10].max()) < -104 / tau  # e^rest is below float32's range at τ = 1
    ids, values, none = distil._topk(logits.clone(), 300, 1.0)
    assert torch.equal(none, torch.full((40,), float("-inf")))
    full = F.log_softmax(logits, dim=-1).gather(-1, ids)
    torch.testing.assert_close(values, full, rtol=1e-6, atol=1e-5)


def test_topk_kl_is_the_full_kl_at_full_k_and_a_lower_bound_below(teacher, seqs) -> None:
    student = build_student(ARCH, teacher, seed=1, init="random")
    batch = make_batch(seqs[:4])
    with torch.no_grad():
        s_logits = distil.learned_logits(student, batch)
        t_logits = _plain_logits(teacher, seqs[:4])
    full = float(kd_loss(s_logits, t_logits, tau=2.0))
    kls = []
    for k in (1, 4, 16, VOCAB):
        targets, _ = teacher_targets(teacher, seqs[:4], top_k=k, tau=2.0, batch_size=4)
        kls.append(float(topk_kl(s_logits, distil.batch_targets(targets, seqs[:4]), tau=2.0)))
    assert kls[-1] == pytest.approx(full, rel=1e-5)
    assert all(0 <= a <= b + 1e-6 for a, b in zip(kls, kls[1:], strict=False))  # finer, larger


def test_pca_init_projects_the_teacher_embedding(teacher) -> None:
    emb = teacher.get_input_embeddings().weight.detach()  # (V, 32)
    full = principal_projection(emb, 32)
    assert torch.allclose(full @ full.T, emb @ emb.T, atol=1e-4)  # a rotation at full rank
    student = build_student(ARCH, teacher, seed=0, init="pca")
    got = student.get_input_embeddings().weight.detach()
    assert torch.allclose(got, principal_projection(emb, ARCH["hidden"]))
    assert student.generation_config.eos_token_id == teacher.generation_config.eos_token_id
    with pytest.raises(ValueError, match="cannot project"):
        principal_projection(emb, 33)


# ---------------------------------------------------------------- loop


def _train(teacher, seqs, s: DistilSpec, seed: int = 0, **kw):
    train, val = split_sequences(seqs, 0.2, seed=0)
    targets, _ = teacher_targets(teacher, seqs, top_k=s.top_k, tau=s.tau, batch_size=8)
    student = build_student(ARCH, teacher, seed=seed)
    return student, distil_train(student, train, val, s, targets, **kw)


def test_a_few_steps_reduce_the_loss(teacher, seqs) -> None:
    _, curve = _train(teacher, seqs, spec(steps=40, eval_every=10))
    assert curve[-1]["val_ce"] < curve[0]["val_ce"] - 0.3
    assert curve[-1]["val_kl"] < curve[0]["val_kl"]
    assert curve[-1]["val_match"] > curve[0]["val_match"]
    assert curve[-1]["tokens"] > curve[0]["tokens"] > 0


def test_bfloat16_training_learns_like_float32_and_keeps_float32_weights(teacher, seqs) -> None:
    """Training under bfloat16 autocast (train.dtype) moves the weights differently from
    float32 (the forward did run in bfloat16), keeps weights in float32 and learns as well;
    validation runs in float32 in both."""
    runs = {d: _train(teacher, seqs, spec(steps=40, eval_every=10, dtype=d))
            for d in ("float32", "bfloat16")}  # fmt: skip
    (s32, c32), (s16, c16) = runs["float32"], runs["bfloat16"]
    assert all(p.dtype == torch.float32 for p in s16.parameters())
    assert not torch.equal(s16.model.layers[0].mlp.up_proj.weight,
                           s32.model.layers[0].mlp.up_proj.weight)  # fmt: skip
    assert c16[-1]["val_ce"] < c16[0]["val_ce"] - 0.3
    assert c16[-1]["val_ce"] == pytest.approx(c32[-1]["val_ce"], rel=0.1)
    with pytest.raises(ValueError, match="compute dtype"):
        _train(teacher, seqs, spec(steps=1, dtype="float16"))


def test_distil_model_resolves_the_training_dtype(teacher, records, monkeypatch) -> None:
    """`auto` becomes bfloat16 where the CPU computes it natively, float32 elsewhere, and the
    stats record which one trained."""
    decl = {**DECL, "train": {**DECL["train"], "beta": 0.0, "steps": 2, "dtype": "auto"}}
    for native, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr("kvspec.models.load.native_bfloat16", lambda device, n=native: n)
        assert distil.distil_model(teacher, records, decl, seed=0)[2]["train_dtype"] == want


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _rows(curve) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in curve]


def test_resume_after_interruption_gives_identical_weights_and_curve(
    teacher, seqs, tmp_path: Path, monkeypatch
) -> None:
    s = spec()
    full_model, full = _train(teacher, seqs, s)
    ckpt = tmp_path / "state.pt"
    real = distil.lr_at

    def crash_at_step_10(step: int, sp: DistilSpec) -> float:
        if step == 10:
            raise KeyboardInterrupt  # killed mid-run, after the checkpoint at step 8
        return real(step, sp)

    monkeypatch.setattr(distil, "lr_at", crash_at_step_10)
    with pytest.raises(KeyboardInterrupt):
        _train(teacher, seqs, s, checkpoint=ckpt, fingerprint="f")
    monkeypatch.setattr(distil, "lr_at", real)
    assert torch.load(ckpt, weights_only=False)["step"] == 8
    model, resumed = _train(teacher, seqs, s, seed=7, checkpoint=ckpt, fingerprint="f")
    assert _rows(resumed) == _rows(full)
    got, want = _weights(model), _weights(full_model)
    assert all(torch.equal(got[k], want[k]) for k in want)
    # a state of another configuration is ignored, not loaded
    _, other = _train(teacher, seqs, s, checkpoint=ckpt, fingerprint="other")
    assert _rows(other) == _rows(full)


def test_frozen_embeddings_stay_as_initialised(teacher, seqs) -> None:
    student, curve = _train(teacher, seqs, spec(freeze_embeddings=True))
    want = principal_projection(teacher.get_input_embeddings().weight.detach(), ARCH["hidden"])
    assert torch.equal(student.get_input_embeddings().weight.detach(), want)
    assert curve[-1]["val_ce"] < curve[0]["val_ce"]  # the layers still learn


def test_distil_model_without_teacher_pass_when_beta_is_zero(teacher, records) -> None:
    decl = {**DECL, "train": {**DECL["train"], "beta": 0.0, "steps": 4}}
    student, curve, stats = distil.distil_model(teacher, records, decl, seed=0)
    assert stats["teacher_seconds"] == 0.0 and np.isnan(stats["teacher_argmax_agreement"])
    assert curve[-1]["val_kl"] == 0.0
    assert stats["sequences"] == {"train": 19, "corpus": 0, "val": 5}
    assert stats["parameters"] < stats["teacher_parameters"]
    assert student.config.vocab_size == VOCAB


def test_target_slice_of_every_layer_is_the_teacher(teacher) -> None:
    arch = {**ARCH, "hidden": 32, "intermediate": 64, "heads": 4, "kv_heads": 2, "layers": 2}
    whole = build_student(arch, teacher, seed=0, init="target", layers=[0, 1]).eval()
    ids = torch.tensor([[3, 9, 1, 4]])
    with torch.no_grad():
        assert torch.equal(whole(input_ids=ids).logits, teacher(input_ids=ids).logits)
    one = build_student({**arch, "layers": 1}, teacher, seed=0, init="target", layers=[1])
    assert len(one.model.layers) == 1 and one.config.num_hidden_layers == 1
    got, want = one.model.layers[0].mlp.up_proj.weight, teacher.model.layers[1].mlp.up_proj.weight
    assert torch.equal(got, want) and got is not want  # a copy
    with pytest.raises(ValueError, match="disagrees"):
        build_student(ARCH, teacher, seed=0, init="target", layers=[0])  # hidden 16 != 32
    with pytest.raises(ValueError, match="distinct teacher layers"):
        build_student(arch, teacher, seed=0, init="target", layers=[0, 5])


def test_restricted_kl_is_the_coarsened_kl_over_the_readout(teacher, seqs) -> None:
    """Teacher top-k tokens outside a reduced readout join the rest bucket: the KL equals
    the one computed by hand over (kept top-k tokens, everything else)."""
    keep_ids = torch.arange(0, VOCAB, 2)  # even tokens
    to_draft = torch.full((VOCAB,), -1).index_copy_(0, keep_ids, torch.arange(len(keep_ids)))
    batch = make_batch(seqs[:3])
    targets, _ = teacher_targets(teacher, seqs[:3], top_k=6, tau=1.0, batch_size=4)
    cat = distil.batch_targets(targets, seqs[:3])
    keep = torch.ones(len(batch.labels), dtype=torch.bool)
    s_logits = torch.randn(len(batch.labels), len(keep_ids), dtype=torch.float64)
    s_logp = torch.log_softmax(s_logits, -1)
    got = float(distil.topk_kl_logp(s_logp, distil.restrict_targets(cat, keep, to_draft)))
    rows = []
    for ids, logp, s in zip(cat[0], cat[1].double(), s_logp, strict=True):
        inside = [(i, lp) for i, lp in zip(ids.tolist(), logp.tolist(), strict=True) if i % 2 == 0]
        kl, t_in, s_in = 0.0, 0.0, 0.0
        for i, lp in inside:
            kl += np.exp(lp) * (lp - float(s[i // 2]))
            t_in, s_in = t_in + np.exp(lp), s_in + float(s[i // 2].exp())
        rows.append(kl + (1 - t_in) * (np.log(1 - t_in) - np.log(1 - s_in)))
    assert got == pytest.approx(float(np.mean(rows)), rel=1e-4)


def test_reduced_vocabulary_distillation_learns_over_the_kept_tokens(teacher, records) -> None:
    decl = {**DECL, "vocab": 12, "train": {**DECL["train"], "steps": 30, "eval_every": 10}}
    student, curve, stats = distil.distil_model(teacher, records, decl, seed=0)
    head = distil.reduced_head(student)
    assert stats["vocabulary"] == 12 and head is not None and len(head.ids) == 12
    stops = teacher.generation_config.eos_token_id
    assert set([stops] if isinstance(stops, int) else stops) <= set(head.ids.tolist())
    assert 0 < curve[-1]["val_coverage"] <= 1 and np.isfinite(curve[-1]["val_ce"])
    assert curve[-1]["val_match"] > curve[0]["val_match"]
    assert curve[-1]["val_match"] <= curve[-1]["val_coverage"]  # a miss outside the readout


def test_corpus_never_holds_a_validation_prompt(teacher, records) -> None:
    """SFT text on a prompt whose greedy response is validated would leak it (measured: a
    draft's validation agreement 0.55 against 0.09 acceptance on held-out prompts)."""
    seqs = distil_sequences(records, max_len=40, prompt_loss=False)
    _, val = split_sequences(seqs, DECL["data"]["val_fraction"], seed=0)
    on_val = [distil.Sequence(f"corpus/x/{i}", s.ids[: s.start + 1] + (5, 6, 7), s.start)
              for i, s in enumerate(val)]  # fmt: skip
    fresh = distil.Sequence("corpus/x/new", (9, 8, 7, 6, 5, 4), 2)
    decl = {**DECL, "train": {**DECL["train"], "steps": 2}}
    _, _, stats = distil.distil_model(teacher, records, decl, seed=0, corpus=[*on_val, fresh])
    assert len(on_val) == 5 and stats["sequences"]["corpus"] == 1


def test_corpus_sequences_learn_the_teacher_argmax_and_skip_held_out_prompts(
    teacher, records
) -> None:
    from kvspec.models.distil_corpus import corpus_sequences, heldout_prompts

    class Tok:  # chat-renders "a b c" as ids [1, a, b, c, 2] (prompt) and [.., 3] (reply)
        def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
            ids = [1]
            for m in messages:
                ids += [int(w) for w in m["content"].split()] + [2]
            return ids

    rows = [{"id": str(i), "prompt": f"{i % 7 + 4} {i % 5 + 10}", "response": f"{i % 9 + 20} 21"}
            for i in range(30)]  # fmt: skip
    rows += [{"id": "spaced", "prompt": " 4\n 10 ", "response": "20 21"}]  # "4 10" again
    held = [{"split": "general", "prompt": "4  10"}, {"split": "index", "prompt": "5 11"}]
    exclude = heldout_prompts(held)
    assert exclude == {"4 10"}  # whitespace-normalised, as prompt selection compares texts
    seqs = corpus_sequences({"x": rows}, Tok(), [2], exclude=exclude, max_len=40, limit=8, seed=0)
    assert len(seqs) == 8 and len({s.id for s in seqs}) == 8
    assert all(s.ids[1:3] != (4, 10) for s in seqs)
    everything = corpus_sequences({"x": rows}, Tok(), [2], exclude=exclude, max_len=40,
                                  limit=100, seed=0)  # fmt: skip
    assert len(everything) == 31 - 2 and "corpus/x/spaced" not in {s.id for s in everything}
    assert seqs == corpus_sequences({"x": rows}, Tok(), [2], exclude=exclude, max_len=40,
                                    limit=8, seed=0)  # fmt: skip
    # trained on: the CE's labels are the teacher's argmax, not the reference response
    batch = make_batch(seqs[:2])
    targets, _ = teacher_targets(teacher, seqs[:2], top_k=4, tau=1.0, batch_size=2)
    cat = distil.batch_targets(targets, seqs[:2])
    student = build_student(ARCH, teacher, seed=0, init="random")
    _, ce, _ = distil_loss(student, batch, cat, spec(beta=0.0))
    with torch.no_grad():
        logits = distil.learned_logits(student, batch)
    assert ce == pytest.approx(float(F.cross_entropy(logits, cat[0][:, 0])), rel=1e-5)


# ---------------------------------------------------------------- stage


@pytest.mark.parametrize("on", ["cpu", "second device"])
def test_distil_stage_writes_model_with_teacher_tokenizer(
    on: str, tmp_path: Path, monkeypatch, request
) -> None:
    """The rule's entry point, with the teacher on the CPU and on a second torch device
    (tests/second_device.py: the paper scale distils on GPUs)."""
    from transformers import AutoTokenizer

    from kvspec.models.load import load_model
    from kvspec.models.stages import distil_stage

    device = "cpu" if on == "cpu" else request.getfixturevalue("second_device")
    teacher, tok, teacher_dir, responses = stage_teacher(tmp_path, ARCH)
    corpus = tmp_path / "sft.jsonl"  # one prompt is held out ("x + 1"): never drawn
    corpus.write_text(
        "".join(
            json.dumps({"id": str(i), "prompt": p, "response": "x + 1"}) + "\n"
            for i, p in enumerate(["x + 1", "def g", "hello f", "return"])
        )
    )
    decl = {**DECL, "vocab": 40, "train": {**DECL["train"], "steps": 4, "batch_size": 2},
            "data": {**DECL["data"], "corpus": ["sft"], "corpus_limit": 5}}  # fmt: skip
    out = tmp_path / "out"
    ckpt = tmp_path / "ckpt" / "draft.pt"
    distil_stage(
        teacher=str(teacher_dir), responses=str(responses), decl=decl, seed=0, threads=1,
        out_model=str(out / "draft"), out_curve=str(out / "curve.csv"),
        out_stats=str(out / "stats.json"), checkpoint=str(ckpt), corpus={"sft": str(corpus)},
        device=device,
    )  # fmt: skip
    model, _ = load_model(out / "draft")
    assert model.config.hidden_size == 16 and model.config.vocab_size == teacher.config.vocab_size
    assert len(distil.reduced_head(model).ids) == 40
    saved = AutoTokenizer.from_pretrained(out / "draft")
    assert saved.get_vocab() == tok.get_vocab() and saved.chat_template == tok.chat_template
    assert model.generation_config.eos_token_id == teacher.generation_config.eos_token_id
    curve = pd.read_csv(out / "curve.csv")
    assert list(curve["step"]) == [4] and {"val_ce", "val_match", "train_kl"} <= set(curve)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["sequences"] == {"train": 7, "corpus": 3, "val": 1} and stats["vocabulary"] == 40
    assert stats["provenance"]["teacher"] == str(teacher_dir) and stats["provenance"]["config_hash"]
    assert not ckpt.exists() and len(list((ckpt.parent / "teacher").glob("*.pt"))) == 1
    # a second draft of the same teacher and data settings reuses that teacher pass
    monkeypatch.setattr(distil, "teacher_targets", lambda *a, **k: pytest.fail("recomputed"))
    distil_stage(
        teacher=str(teacher_dir), responses=str(responses),
        decl={**decl, "train": {**decl["train"], "steps": 2}}, seed=0, threads=1,
        out_model=str(out / "draft2"), out_curve=str(out / "curve2.csv"),
        out_stats=str(out / "stats2.json"), checkpoint=str(ckpt.with_name("draft2.pt")),
        corpus={"sft": str(corpus)}, device=device,
    )  # fmt: skip
    assert (out / "draft2").is_dir()


def test_spec_dataclass_matches_the_schema(schema: dict) -> None:
    props = schema["definitions"]["distil"]["properties"]["train"]["properties"]
    fields = {f.name for f in dataclasses.fields(DistilSpec)} - {"seed"}
    assert fields == set(props)
