"""Decode-speed benchmark (kvspec.care.decode_speed): rows per model and context, measured
cache bytes, cropping between repeats, and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kvspec.care.convert import full_factors, mla_from_factors
from kvspec.care.decode_speed import decode_seconds, decode_speed_stage, prefill
from kvspec.care.restore import RestoreSpec, restore_model
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps in the sun. " * 4
ARCH = {"family": "llama", "hidden": 64, "intermediate": 96, "layers": 2, "heads": 4,
        "kv_heads": 2, "max_position": 64}  # fmt: skip
RANK_K, RANK_V = [6, 10], [8, 4]  # of g_h·d_h = 32


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    """A tiny GQA Llama and an MLA conversion of it, saved as the workflow saves them."""
    root = tmp_path_factory.mktemp("models")
    tok = train_tokenizer([TEXT] * 20, 300, 128)
    gqa = build_model(ARCH, tok, seed=0)
    gqa.save_pretrained(root / "gqa")
    mla = mla_from_factors(gqa, full_factors(gqa, "svd"), RANK_K, RANK_V)
    mla.save_pretrained(root / "mla")
    covs = [torch.eye(64, dtype=torch.float64)] * 2
    restore_model(gqa, covs, RestoreSpec("transmla", kv_lora_rank=8, freqfold=2)).save_pretrained(
        root / "restored"
    )
    for name in ("gqa", "mla", "restored"):
        tok.save_pretrained(root / name)
    return {"GQA": str(root / "gqa"), "MLA": str(root / "mla"), "restored": str(root / "restored")}


def test_rows_per_model_and_context_with_measured_cache(saved, tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    decode_speed_stage(saved, str(out), contexts=[8, 24], new_tokens=4, repeats=2, seed=0)
    record = json.loads(out.read_text())
    rows = {(r["model"], r["context"]): r for r in record["rows"]}
    assert set(rows) == {(m, c) for m in saved for c in (8, 24)}
    for context in (8, 24):
        gqa, mla = rows["GQA", context], rows["MLA", context]
        assert gqa["vs_gqa"] == 1.0 and gqa["tok_s"] > 0 and mla["tok_s"] > 0
        assert gqa["cache_bytes_per_token"] == 2 * 2 * 32 * 4  # K and V, 2 layers, fp32
        assert mla["cache_bytes_per_token"] == (sum(RANK_K) + sum(RANK_V)) * 4
        assert mla["layout_numbers_per_token"] == sum(RANK_K) + sum(RANK_V)
        assert mla["cache_vs_gqa"] == pytest.approx(28 / 128)
        restored = rows["restored", context]  # latent 8 + RoPE key 16/2, per layer
        assert restored["layout_numbers_per_token"] == 2 * (8 + 8)
        assert restored["cache_bytes_per_token"] == 2 * (8 + 8) * 4  # HF caches the latent
    assert record["settings"]["contexts"] == [8, 24] and record["config_hash"]


def test_each_repeat_decodes_from_the_same_prompt(saved) -> None:
    from kvspec.models.load import load_model

    model, _ = load_model(saved["MLA"])
    prompt = torch.randint(0, 100, (1, 10), generator=torch.Generator().manual_seed(1))
    state = prefill(model, prompt)
    before = state.logits.clone()
    for _ in range(2):
        assert decode_seconds(model, state, 5) > 0
        assert state.cache.get_seq_length() == 10  # cropped back to the prompt
    assert torch.equal(state.logits, before)


def test_a_context_beyond_the_models_positions_is_refused(saved, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_position_embeddings 64.*care.decode_speed"):
        decode_speed_stage(
            saved, str(tmp_path / "x.json"), contexts=[62], new_tokens=4, repeats=1, seed=0
        )


def test_the_restored_row_rebuilds_the_model_heal_restore_saves(tmp_path: Path) -> None:
    """`restored`: the job restores the original itself and times it last; the model it
    rebuilds is the one heal_restore saves (same weights, byte for byte), and the row equals
    that saved model's row in everything but its speed."""
    from safetensors.torch import load_file

    from kvspec.care.covariance import collect_covariances, save_stats
    from kvspec.care.heal_stages import restore_stage, save_restoration

    tok = train_tokenizer([TEXT] * 20, 300, 128)
    build_model(ARCH, tok, seed=0).save_pretrained(tmp_path / "gqa")
    tok.save_pretrained(tmp_path / "gqa")
    from transformers import AutoModelForCausalLM

    gqa = AutoModelForCausalLM.from_pretrained(tmp_path / "gqa")
    ids = torch.randint(0, len(tok), (4, 16), generator=torch.Generator().manual_seed(0))
    save_stats(collect_covariances(gqa, [ids]), tmp_path / "stats.safetensors", {})
    opts = {"care_alpha": 0.05, "care_lambda": 0.01, "care_shrinkage": "lambda_max",
            "asvd_alpha": 0.5, "randomized": False}  # fmt: skip
    settings = {"method": "transmla-care", "rank": 16, "freqfold": 4, "cache": "matched",
                "rope_width": None, "schedule": "uniform", "shrinkage": None,
                "rank_bounds": None}  # fmt: skip
    source, stats = str(tmp_path / "gqa"), str(tmp_path / "stats.safetensors")
    restore_stage(source, stats, str(tmp_path / "saved"), factorize_opts=opts, **settings)
    (tmp_path / "again").mkdir()
    save_restoration(source, stats, settings, opts, tmp_path / "again")
    saved = load_file(tmp_path / "saved" / "model.safetensors")
    again = load_file(tmp_path / "again" / "model.safetensors")
    assert saved.keys() == again.keys()
    assert all(torch.equal(saved[k], again[k]) for k in saved)

    out = tmp_path / "speed.json"
    restored = {"label": "rebuilt", "source": source, "stats": stats, "settings": settings,
                "opts": opts}  # fmt: skip
    models = {"GQA": source, "saved": str(tmp_path / "saved")}
    decode_speed_stage(models, str(out), contexts=[8], new_tokens=2, repeats=1, seed=0,
                       restored=restored)  # fmt: skip
    record = json.loads(out.read_text())
    rows = {r["model"]: r for r in record["rows"]}
    assert list(rows) == ["GQA", "saved", "rebuilt"]  # the rebuilt model is timed last
    for key in ("layout_numbers_per_token", "cache_bytes_per_token", "absorbed", "cache_vs_gqa"):
        assert rows["rebuilt"][key] == rows["saved"][key], key
    assert rows["rebuilt"]["layout_numbers_per_token"] == 2 * 2 * 16  # 2 layers, cache 2r
    assert record["restored"]["settings"]["method"] == "transmla-care"
