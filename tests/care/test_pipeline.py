"""CARE stages as file functions: calibration batches, factors/plans I/O, truncation, Figure
3.1 plans, and the covariance → factorize → allocate → convert chain on a tiny saved model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from kvspec.care.calibration import batches, calibration_tokens, render_record
from kvspec.care.convert import full_factors, mla_from_factors, truncate
from kvspec.care.covariance import collect_covariances
from kvspec.care.factorize import factorize
from kvspec.care.pipeline import (
    convert_stage,
    covariance_stage,
    evaluate_job,
    evaluate_stage,
    factorize_stage,
    kv_cache_widths,
)
from kvspec.care.plans import allocate_stage, sensitivity_stage
from kvspec.care.sensitivity import drop_group_plan, halve_layer_plan, sv_groups
from kvspec.care.store import load_factors, load_plan, save_factors
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer

from .test_convert import ARCHS, FULL, _ids, _source

TEXT = "calibration text about cats and dogs and the weather in the park today"
OPTS = {"care_alpha": 0.05, "care_lambda": 0.01, "care_shrinkage": "lambda_max",
        "asvd_alpha": 0.5, "randomized": False}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([TEXT] * 20, 300, 128)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok) -> Path:
    """A tiny Llama GQA model + tokenizer saved like results/models/<model>."""
    arch = {"family": "llama", "hidden": 64, "intermediate": 96, "layers": 2, "heads": 4,
            "kv_heads": 2, "max_position": 128}  # fmt: skip
    path = tmp_path_factory.mktemp("model") / "target"
    build_model(arch, tok, seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_calibration_tokens_seeded_windows(tmp_path, tok) -> None:
    data = _jsonl(tmp_path / "t.jsonl", [{"id": str(i), "text": f"{TEXT} {i}"} for i in range(30)])
    a = calibration_tokens(data, "text", tok, n_samples=6, seq_len=8, seed=0)
    assert a.shape == (6, 8) and a.dtype == torch.long
    assert torch.equal(a, calibration_tokens(data, "text", tok, 6, 8, seed=0))
    assert not torch.equal(a, calibration_tokens(data, "text", tok, 6, 8, seed=1))
    assert [b.shape[0] for b in batches(a, 4)] == [4, 2]
    with pytest.raises(ValueError, match="are needed"):
        calibration_tokens(data, "text", tok, n_samples=10_000, seq_len=64, seed=0)


def test_instructions_render_with_chat_template(tok) -> None:
    rec = {"id": "0", "prompt": "hi", "response": "hello"}
    text = render_record(rec, "instruction", tok)
    assert "hi" in text and "hello" in text and text.index("hi") < text.index("hello")
    with pytest.raises(ValueError, match="cannot calibrate"):
        render_record({"query": "q"}, "multiple_choice", tok)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method", ["svd", "asvd", "care"])
def test_truncated_full_factors_equal_rank_r_factorization(arch, method) -> None:
    model = _source(arch)
    stats = collect_covariances(model, [_ids(1, batch=4, length=16)], progress=False)
    full = full_factors(model, method, stats)
    weight = model.model.layers[1].self_attn.v_proj.weight
    kw = {"cov": stats.cov[1]} if method == "care" else {}
    kw = {"mean_abs": stats.mean_abs[1]} if method == "asvd" else kw
    direct = factorize(weight, 5, method, **kw)
    cut = truncate(full[3], 5)
    torch.testing.assert_close(cut.a @ cut.b, direct.a @ direct.b, atol=1e-5, rtol=1e-4)


def test_factors_round_trip_and_drop(tmp_path) -> None:
    model = _source("qwen3")
    factors = full_factors(model, "svd")
    save_factors(factors, tmp_path / "f.safetensors", {"method": "svd"})
    back = load_factors(tmp_path / "f.safetensors")
    assert len(back) == 4 and all(torch.equal(a.a, b.a) for a, b in zip(factors, back, strict=True))
    n = 2
    mla = mla_from_factors(model, back, [FULL] * n, [FULL] * n, [[0, 1], []], [[], [5]])
    assert mla.config.kv_rank_k == [FULL - 2, FULL] and mla.config.kv_rank_v == [FULL, FULL - 1]
    with pytest.raises(ValueError, match="not a factors file"):
        save_file({"x": torch.zeros(1)}, str(tmp_path / "bad.safetensors"))
        load_factors(tmp_path / "bad.safetensors")


def test_figure_3_1_plans() -> None:
    plan = halve_layer_plan(4, 32, layer=2)
    assert plan["ranks_k"] == [32, 32, 16, 32] == plan["ranks_v"]
    groups = sv_groups(32, 10)
    assert [i for g in groups for i in g] == list(range(32)) and len(groups) == 10
    assert all(len(g) in (3, 4) for g in groups)
    drop = drop_group_plan(4, 32, group=9, groups=10, last_layers=2)
    assert drop["drop_k"][:2] == [[], []] and drop["drop_k"][2] == groups[9]
    assert drop["layers"] == [2, 3]
    with pytest.raises(ValueError):
        halve_layer_plan(4, 32, layer=4)
    with pytest.raises(ValueError):
        drop_group_plan(4, 32, group=10, groups=10, last_layers=1)


def test_stages_end_to_end(tmp_path, saved) -> None:
    """covariance → care factors → water-filled plan → MLA dir that from_pretrained loads;
    a full-rank plan reproduces the source logits."""
    data = _jsonl(tmp_path / "c.jsonl", [{"id": str(i), "text": f"{TEXT} {i}"} for i in range(40)])
    calib = {"n_samples": 4, "seq_len": 16, "batch_size": 2}
    cov = str(tmp_path / "cov.safetensors")
    covariance_stage(str(saved), str(data), cov, kind="text", calib=calib, seed=0)
    factors = tmp_path / "care.safetensors"
    factorize_stage(str(saved), cov, str(factors), method="care", opts=OPTS, seed=0)
    allocate_stage(str(factors), "waterfill", 4, str(tmp_path / "w.json"))
    allocate_stage(str(factors), "uniform", FULL, str(tmp_path / "full.json"))
    allocate_stage(str(factors), "waterfill", 4, str(tmp_path / "b.json"), bounds=[0.75, 1.25])
    bounded = load_plan(tmp_path / "b.json")
    assert all(3 <= r <= 5 for r in bounded["ranks_k"] + bounded["ranks_v"])
    assert sum(bounded["ranks_k"] + bounded["ranks_v"]) == 4 * 4
    assert bounded["bounds"] == [0.75, 1.25]
    plan = load_plan(tmp_path / "w.json")
    assert sum(plan["ranks_k"]) + sum(plan["ranks_v"]) == 2 * 2 * 4
    assert 0 < plan["retained_energy"] <= plan["total_energy"]
    for name in ("w", "full"):
        convert_stage(
            str(saved), str(factors), str(tmp_path / f"{name}.json"), str(tmp_path / name)
        )
    src = AutoModelForCausalLM.from_pretrained(saved).eval()
    full = AutoModelForCausalLM.from_pretrained(tmp_path / "full").eval()
    low = AutoModelForCausalLM.from_pretrained(tmp_path / "w").eval()
    assert low.config.model_type == "kvspec_mla" and low.config.kv_rank_k == plan["ranks_k"]
    ids = _ids(3, length=10) % 200
    with torch.no_grad():
        torch.testing.assert_close(full(ids).logits, src(ids).logits, atol=1e-4, rtol=1e-4)
    assert kv_cache_widths(low) == {"cached": 16, "full": 2 * 2 * FULL}
    assert kv_cache_widths(src) == {"cached": 2 * 2 * FULL, "full": 2 * 2 * FULL}
    sensitivity_stage(
        str(factors), "svgroup-g1", {"groups": 4, "last_layers": 1}, str(tmp_path / "g.json")
    )
    assert load_plan(tmp_path / "g.json")["drop_v"][1] == sv_groups(FULL, 4)[1]
    with pytest.raises(ValueError, match="outside"):
        allocate_stage(str(factors), "uniform", FULL + 1, str(tmp_path / "x.json"))
    with pytest.raises(ValueError, match="allocation"):
        allocate_stage(str(factors), "greedy", 4, str(tmp_path / "x.json"))


def test_calibration_and_scoring_on_a_second_device_equal_the_cpu_s(
    tmp_path, saved, second_device
) -> None:
    """The covariance and evaluate rules' entry points with the model on another device
    (the paper scale's GPUs; tests/second_device.py): the same statistics and scores."""
    from kvspec.care.covariance import load_stats

    data = _jsonl(tmp_path / "c.jsonl", [{"id": str(i), "text": f"{TEXT} {i}"} for i in range(40)])
    text = [{"id": str(i), "text": f"{TEXT} number {i} and more words"} for i in range(3)]
    tasks = {"wiki": {"metric": "word_perplexity", "template": "kvspec_wikitext2",
                      "data": str(_jsonl(tmp_path / "t.jsonl", text)), "lm_eval": None,
                      "limit": 2, "max_words": None}}  # fmt: skip
    task_dir = str(Path(__file__).parents[2] / "config" / "lm_eval_tasks")
    calib = {"n_samples": 4, "seq_len": 16, "batch_size": 2}
    stats, scores = {}, {}
    for device in ("cpu", second_device):
        cov = tmp_path / f"{device}.safetensors"
        covariance_stage(str(saved), str(data), str(cov), kind="text", calib=calib, seed=0,
                         device=device)  # fmt: skip
        stats[device] = load_stats(cov)
        out = tmp_path / f"{device}.json"
        settings = {"batch_size": 2, "max_length": 64, "seed": 0, "dtype": "float32",
                    "device": device}  # fmt: skip
        evaluate_stage(str(saved), str(out), tasks=tasks, task_dir=task_dir, settings=settings,
                       meta={"model": "target", "variant": "original"}, threads=1)  # fmt: skip
        scores[device] = json.loads(out.read_text())["metrics"]["wiki"]["value"]
    assert scores[second_device] == pytest.approx(scores["cpu"], rel=1e-5)
    cpu, moved = stats["cpu"], stats[second_device]
    assert moved.count == cpu.count
    for a, b in zip(cpu.cov + cpu.mean_abs, moved.cov + moved.mean_abs, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_evaluate_stage_loads_the_settings_dtype(tmp_path, saved) -> None:
    """The evaluate rules' entry point scores the model in `settings.dtype` (eval.dtype): the
    record says so, and bfloat16 perplexity stays near float32's on the same documents."""
    text = [{"id": str(i), "text": f"{TEXT} number {i} and more words"} for i in range(3)]
    tasks = {"wiki": {"metric": "word_perplexity", "template": "kvspec_wikitext2",
                      "data": str(_jsonl(tmp_path / "t.jsonl", text)), "lm_eval": None,
                      "limit": 2, "max_words": None}}  # fmt: skip
    task_dir = str(Path(__file__).parents[2] / "config" / "lm_eval_tasks")
    records = {}
    for dtype in ("float32", "bfloat16"):
        out = tmp_path / f"{dtype}.json"
        settings = {"batch_size": 2, "max_length": 64, "seed": 0, "dtype": dtype, "device": "cpu"}
        evaluate_stage(str(saved), str(out), tasks=tasks, task_dir=task_dir, settings=settings,
                       meta={"model": "target", "variant": "original"}, threads=1)  # fmt: skip
        records[dtype] = json.loads(out.read_text())
        assert records[dtype]["dtype"] == dtype
    f32, bf16 = (records[d]["metrics"]["wiki"]["value"] for d in ("float32", "bfloat16"))
    assert f32 != bf16 and bf16 == pytest.approx(f32, rel=0.05)


@pytest.mark.parametrize("native", [True, False])
def test_evaluate_stage_auto_dtype_follows_the_hardware(
    tmp_path, saved, monkeypatch, native
) -> None:
    """eval.dtype "auto" is decided when the job runs: bfloat16 where the device computes it
    natively, float32 elsewhere; the record carries the dtype used."""
    from kvspec.models import load

    monkeypatch.setattr(load, "native_bfloat16", lambda device: native)
    text = [{"id": "0", "text": f"{TEXT} and more words"}]
    tasks = {"wiki": {"metric": "word_perplexity", "template": "kvspec_wikitext2",
                      "data": str(_jsonl(tmp_path / "t.jsonl", text)), "lm_eval": None,
                      "limit": 1, "max_words": None}}  # fmt: skip
    task_dir = str(Path(__file__).parents[2] / "config" / "lm_eval_tasks")
    out = tmp_path / "auto.json"
    settings = {"batch_size": 2, "max_length": 64, "seed": 0, "dtype": "auto", "device": "cpu"}
    evaluate_stage(str(saved), str(out), tasks=tasks, task_dir=task_dir, settings=settings,
                   meta={"model": "target", "variant": "original"}, threads=1)  # fmt: skip
    assert json.loads(out.read_text())["dtype"] == ("bfloat16" if native else "float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_evaluate_job_scores_what_convert_mla_saves(tmp_path, saved, dtype) -> None:
    """The evaluate rules' entry point: given factors and a rank plan (evaluate_lmeval), it
    converts inside the job and writes the record convert_mla's saved model gives, to the last
    digit, in each dtype; the low-rank model scores differently from the original, and no
    scratch copy is left beside the output."""
    factors = str(tmp_path / "svd.safetensors")
    plan = str(tmp_path / "r2.json")
    factorize_stage(str(saved), None, factors, method="svd", opts=OPTS, seed=0)
    allocate_stage(factors, "uniform", 2, plan)
    text = [{"id": str(i), "text": f"{TEXT} number {i} and more words"} for i in range(3)]
    tasks = {"wiki": {"metric": "word_perplexity", "template": "kvspec_wikitext2",
                      "data": str(_jsonl(tmp_path / "t.jsonl", text)), "lm_eval": None,
                      "limit": 2, "max_words": None}}  # fmt: skip
    settings = {"batch_size": 2, "max_length": 64, "seed": 0, "dtype": dtype, "device": "cpu"}
    job = {"tasks": tasks, "task_dir": str(Path(__file__).parents[2] / "config" / "lm_eval_tasks"),
           "settings": settings, "variant": "svd-none/uniform-r2"}  # fmt: skip
    convert_stage(str(saved), factors, plan, str(tmp_path / "saved-r2"))
    evaluate_job({"model": str(tmp_path / "saved-r2")}, str(tmp_path / "saved.json"), "target",
                 1, **job)  # fmt: skip
    out = tmp_path / "evaluate" / "r2.json"  # its directory does not exist yet
    evaluate_job({"model": str(saved), "factors": factors, "plan": plan}, str(out), "target", 1,
                 **job)  # fmt: skip
    fused, separate = json.loads(out.read_text()), json.loads((tmp_path / "saved.json").read_text())
    assert fused == separate and fused["kv_cached_per_token"] == 2 * 2 * 2
    assert fused["variant"] == "svd-none/uniform-r2" and fused["dtype"] == dtype
    evaluate_job({"model": str(saved)}, str(tmp_path / "original.json"), "target", 1, **job)
    original = json.loads((tmp_path / "original.json").read_text())["metrics"]["wiki"]["value"]
    assert fused["metrics"]["wiki"]["value"] != pytest.approx(original, rel=1e-4)
    assert [p.name for p in out.parent.iterdir()] == ["r2.json"]
