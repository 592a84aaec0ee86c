"""The lecture's intensity formulas and the roofline measurement."""

import pytest

from kvspec.lecture import roofline as rl


def test_h100_ridge_is_the_lectures_295() -> None:
    assert rl.ridge(rl.H100_PEAK_FLOPS, rl.H100_BANDWIDTH) == pytest.approx(295.2, abs=0.1)


def test_linear_intensity_tends_to_the_batch_size() -> None:
    big = 10**6
    for b in (1, 8, 64):
        assert rl.linear_intensity(b, big, big) == pytest.approx(b, rel=1e-3)


def test_mlp_intensity_tends_to_b_times_t() -> None:
    big = 10**7
    assert rl.mlp_intensity(4, 16, big, big) == pytest.approx(64, rel=1e-3)
    assert rl.mlp_intensity(4, 16, 576, 1536) < 64  # activations count at real sizes


def test_attention_intensity_lecture_limits() -> None:
    assert rl.attention_intensity_lecture(1024, 1) < 1  # decode: memory-limited
    assert rl.attention_intensity_lecture(1024, 1024) == 512  # prefill: S / 2


def test_gqa_decode_attention_intensity_is_about_the_group_size() -> None:
    # 2 bytes per number: 2·heads / (2·kv_heads) = the group size, whatever the context
    for s in (512, 8192):
        assert rl.attention_intensity(s, 1, 32, 8, 128) == pytest.approx(4, rel=0.01)
    assert rl.attention_intensity(8192, 1, 32, 32, 128) == pytest.approx(1, rel=0.01)  # MHA


def test_measured_roofline_is_consistent() -> None:
    r = rl.measure_roofline([1, 64], 64, 128, megabytes=4, repeats=2, seed=0)
    assert r["peak_gflop_s"] == max(p["gflop_s"] for p in r["matmul"]) > 0
    assert r["ridge"] == pytest.approx(r["peak_gflop_s"] / r["bandwidth_gb_s"])
    assert r["matmul"][1]["intensity"] > r["matmul"][0]["intensity"]
