"""Table 3.3 stages on tiny saved models: restoration to a loadable DeepSeek-V3 model, and a
healing job killed after its first budget that a rerun completes with the same results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

import kvspec.care.heal as heal_mod
from kvspec.care.covariance import collect_covariances, save_stats
from kvspec.care.heal_stages import ablation_stage, heal_stage, restore_stage
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer

TEXT = "healing text about cats and dogs and the weather in the park today and tomorrow"
OPTS = {"care_alpha": 0.05, "care_lambda": 0.01, "care_shrinkage": "lambda_max",
        "asvd_alpha": 0.5, "randomized": False}  # fmt: skip
TRAIN = {"budgets": [64, 192], "seq_len": 16, "micro_batch": 2, "accum": 2, "lr": 3e-3,
         "warmup_steps": 1, "eval_every": 1, "eval_windows": 4, "ckpt_every": 1}  # fmt: skip
DATA = {"max_tokens": 5000, "val_fraction": 0.1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heal")
    tok = train_tokenizer([TEXT] * 20, 300, 128)
    arch = {"family": "llama", "hidden": 64, "intermediate": 96, "layers": 2, "heads": 4,
            "kv_heads": 2, "max_position": 128}  # fmt: skip
    paths = {}
    for name, seed in (("teacher", 0), ("student", 1)):
        paths[name] = root / name
        build_model(arch, tok, seed=seed).save_pretrained(paths[name])
        tok.save_pretrained(paths[name])
    teacher = AutoModelForCausalLM.from_pretrained(paths["teacher"])
    ids = torch.randint(0, len(tok), (4, 16), generator=torch.Generator().manual_seed(0))
    paths["stats"] = root / "stats.safetensors"
    save_stats(collect_covariances(teacher, [ids]), paths["stats"], {})
    rows = [{"id": str(i), "text": f"{TEXT} {i} " * 3} for i in range(200)]
    paths["data"] = root / "data.jsonl"
    paths["data"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def test_restore_stage_saves_a_deepseek_v3_model_at_the_budget(setup, tmp_path) -> None:
    out = tmp_path / "restored"
    restore_stage(str(setup["teacher"]), str(setup["stats"]), str(out), method="transmla-care",
                  rank=16, freqfold=4, factorize_opts=OPTS)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.model_type == "deepseek_v3"
    assert model.config.kv_lora_rank + model.config.qk_rope_head_dim == 2 * 16
    record = json.loads((out / "kvspec_provenance.json").read_text())
    assert record["kv_cache"]["per_layer"] == 32


def test_restore_stage_half_width_rope_key_and_official_cache(setup, tmp_path) -> None:
    """TransMLA's Llama default (RoPE key of half the head with freqfold 4) and the released
    scripts' cache convention (kv_lora_rank = r, plus the RoPE key)."""
    out = tmp_path / "restored"
    teacher = AutoModelForCausalLM.from_pretrained(setup["teacher"])
    head = teacher.config.hidden_size // teacher.config.num_attention_heads
    restore_stage(str(setup["teacher"]), str(setup["stats"]), str(out), method="transmla",
                  rank=16, freqfold=4, factorize_opts=OPTS, cache="official",
                  rope_width=head // 2)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.qk_rope_head_dim == head // 2
    assert model.config.kv_lora_rank == 16
    record = json.loads((out / "kvspec_provenance.json").read_text())
    assert record["kv_cache"]["per_layer"] == 16 + head // 2


def _outputs(root: Path) -> dict:
    return {
        "models": [str(root / "tokens-64"), str(root / "tokens-192")],
        "curve": str(root / "curve.csv"),
        "stats": str(root / "stats.json"),
    }


def _heal(setup, outputs, state) -> None:
    heal_stage(str(setup["student"]), str(setup["teacher"]), str(setup["data"]), kind="text",
               data_opts=DATA, train_opts=TRAIN, seed=5, outputs=outputs,
               state_path=state)  # fmt: skip


def test_a_killed_healing_job_resumes_and_keeps_its_passed_budgets(
    setup, tmp_path, monkeypatch
) -> None:
    ref = _outputs(tmp_path / "ref")
    _heal(setup, ref, None)
    state = str(tmp_path / "state" / "svd.pt")
    out = _outputs(tmp_path / "run")
    real_step = heal_mod._optimizer_step

    def dies_at_step_2(model, teacher, opt, tokens, spec, step, acc):
        if step == 2:
            raise KeyboardInterrupt("killed")
        return real_step(model, teacher, opt, tokens, spec, step, acc)

    monkeypatch.setattr(heal_mod, "_optimizer_step", dies_at_step_2)
    with pytest.raises(KeyboardInterrupt):
        _heal(setup, out, state)
    assert Path(state).exists() and not Path(out["models"][0]).exists()
    shutil.rmtree(tmp_path / "run", ignore_errors=True)  # Snakemake drops incomplete outputs
    monkeypatch.setattr(heal_mod, "_optimizer_step", real_step)
    _heal(setup, out, state)
    cols = ["step", "tokens", "train_ce", "train_kd", "val_ppl"]
    got, want = pd.read_csv(out["curve"])[cols], pd.read_csv(ref["curve"])[cols]
    pd.testing.assert_frame_equal(got, want, rtol=1e-6)
    for mine, theirs in zip(out["models"], ref["models"], strict=True):
        a = AutoModelForCausalLM.from_pretrained(mine).state_dict()
        b = AutoModelForCausalLM.from_pretrained(theirs).state_dict()
        assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not Path(state).exists() and not list(Path(state).parent.iterdir())


def test_stats_keep_per_window_validation_nll_at_start_and_budgets(setup, tmp_path) -> None:
    """The curve's perplexity is exp(mean window NLL) with its delta-method SE, and the stats
    keep the window NLLs at step 0 and each budget for paired comparisons across methods."""
    out = _outputs(tmp_path)
    _heal(setup, out, None)
    stats = json.loads(Path(out["stats"]).read_text())
    curve = pd.read_csv(out["curve"]).set_index("tokens")
    windows = stats["val_nll_windows"]
    assert set(windows) == {"0", "64", "192"}
    for tokens, nll in windows.items():
        nll = np.asarray(nll)
        assert len(nll) == TRAIN["eval_windows"]
        ppl = float(np.exp(nll.mean()))
        assert curve.loc[int(tokens), "val_ppl"] == pytest.approx(ppl, rel=1e-9)
        se = ppl * nll.std(ddof=1) / np.sqrt(len(nll))
        assert curve.loc[int(tokens), "val_ppl_se"] == pytest.approx(se, rel=1e-9)


def test_fsdp_over_two_processes_heals_like_one_process(setup, tmp_path) -> None:
    """The paper scale heals sharded (FSDP over a node's GPUs); here two gloo processes with
    one micro-batch each against one process with two: the same windows per step, so the same
    curve and weights up to the order of float sums."""
    runs = {}
    for processes, accum in ((1, 2), (2, 1)):
        out = _outputs(tmp_path / f"p{processes}")
        train = {**TRAIN, "accum": accum, "processes": processes, "sharding": "fsdp"}
        heal_stage(str(setup["student"]), str(setup["teacher"]), str(setup["data"]),
                   kind="text", data_opts=DATA, train_opts=train, seed=0, outputs=out)  # fmt: skip
        runs[processes] = out
    stats = [json.loads(Path(runs[n]["stats"]).read_text()) for n in (1, 2)]
    assert [(s["processes"], s["sharded"]) for s in stats] == [(1, False), (2, True)]
    one, two = (pd.read_csv(runs[n]["curve"]) for n in (1, 2))
    measured = ["step", "tokens", "train_ce", "train_kd", "val_ppl"]
    pd.testing.assert_frame_equal(one[measured], two[measured], rtol=1e-4)
    for a, b in zip(runs[1]["models"], runs[2]["models"], strict=True):
        wa, wb = (AutoModelForCausalLM.from_pretrained(d).state_dict() for d in (a, b))
        for name, weight in wa.items():
            torch.testing.assert_close(wb[name], weight, rtol=1e-3, atol=1e-5)


def _ablation(setup, out: Path, variant: dict, state: Path | None = None) -> dict:
    restore = {"rank": 16, "freqfold": 4, "cache": "matched", "rope_width": None}
    variant = {"shrinkage": None, "schedule": "uniform", "rank_bounds": None, **variant}
    ablation_stage(str(setup["teacher"]), str(setup["stats"]), str(setup["data"]), str(out),
                   variant=variant, restore=restore, factorize_opts=OPTS, kind="text",
                   data_opts=DATA, train_opts={**TRAIN, "budgets": [64]}, seed=0,
                   state_path=str(state) if state else None)  # fmt: skip
    return json.loads(out.read_text())


def test_ablation_rows_heal_to_the_budget_and_care_without_shrinkage_is_pca(setup, tmp_path):
    """The entry point of rule heal_ablation: the identity row (CARE without shrinkage) starts
    and ends where TransMLA's PCA row does; λ_max shrinkage starts elsewhere; bounded
    water-filling keeps every layer's rank in [r/2, 2r] and the cache."""
    pca = _ablation(setup, tmp_path / "pca.json", {"method": "transmla-pca"})
    none = _ablation(setup, tmp_path / "none.json",
                     {"method": "transmla-care", "shrinkage": "none"})  # fmt: skip
    lam = _ablation(setup, tmp_path / "lam.json",
                    {"method": "transmla-care", "shrinkage": "lambda_max"})  # fmt: skip
    assert pca["budget"] == 64 and [r["tokens"] for r in pca["curve"]][-1] == 64
    assert set(pca["val_nll_windows"]) == {"0", "64"}

    def gap(run: dict, tokens: str) -> float:
        theirs, ours = run["val_nll_windows"][tokens], pca["val_nll_windows"][tokens]
        return float(np.abs(np.subtract(theirs, ours)).max())

    assert gap(none, "0") < 1e-6 and gap(none, "64") < 1e-6  # measured: 0.0 and 0.0
    assert gap(lam, "0") > 1e-5  # measured 9.0e-5 on this tiny model
    bounded = _ablation(setup, tmp_path / "bounded.json",
                        {"method": "transmla-care", "schedule": "waterfill",
                         "rank_bounds": [0.5, 2.0]})  # fmt: skip
    ranks, lat = bounded["restoration"]["latent_ranks"], bounded["restoration"]["kv_lora_rank"]
    assert sum(ranks) == 2 * lat and all(lat / 2 <= r <= 2 * lat for r in ranks)
    assert bounded["restoration"]["kv_cache"]["per_layer"] == 32
    assert bounded["restoration"]["shrinkage"] == "lambda_max"  # the factorize options'
