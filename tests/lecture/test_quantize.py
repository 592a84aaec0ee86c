"""RTN, mixed precision and AWQ: the lecture's toy numbers and a real layer."""

import pytest
import torch

from kvspec.lecture import quantize as q
from tests.tiny import tiny_llama


def test_toy_example_gives_the_lectures_numbers() -> None:
    rows = {r["method"]: r["y"] for r in q.toy_example(0.1, 4.0, grid=20)}
    assert rows["full precision"] == pytest.approx(3.03)
    assert rows["RTN"] == 0
    assert rows["mixed precision"] == pytest.approx(3.0)
    assert rows["AWQ (s = 4 on the salient channel)"] == pytest.approx(2.5)
    searched = next(v for k, v in rows.items() if k.startswith("AWQ (searched"))
    assert abs(searched - 3.03) < abs(2.5 - 3.03)  # the search beats the lecture's fixed s


def test_group_quantizer_levels_and_exact_grid() -> None:
    quant = q.group_quantizer(bits=2, group=4)
    w = torch.randn(3, 10)
    out = quant(w)
    for j in range(0, 10, 4):
        for row in out[:, j : j + 4]:
            assert len(torch.unique(row.round(decimals=5))) <= 4
    grid = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    torch.testing.assert_close(q.group_quantizer(2, 4)(grid), grid)


def test_scaling_is_exact_before_rounding() -> None:
    w, s = torch.randn(4, 6), torch.rand(6) + 0.5
    torch.testing.assert_close(q.scaled(w, s, lambda x: x), w)


def test_awq_and_mixed_beat_rtn_on_an_outlier_channel() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(16, 32, generator=gen) * 0.05
    x = torch.randn(256, 32, generator=gen)
    x[:, 3] *= 50  # one salient input channel
    quant = q.group_quantizer(bits=3, group=32)
    mag = x.abs().mean(0)

    def err(wq: torch.Tensor) -> float:
        return float(((x @ wq.T - x @ w.T) ** 2).mean())

    awq, alpha = q.awq(w, mag, x, quant, grid=10)
    assert err(awq) < err(q.rtn(w, quant))
    assert err(q.mixed(w, mag, quant, fraction=1 / 32)) < err(q.rtn(w, quant))
    assert alpha > 0


def test_quantize_model_touches_every_decoder_linear_only() -> None:
    model = tiny_llama(0, double=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = q.collect_stats(model, [torch.randint(0, 64, (2, 12))], rows=16, seed=0)
    assert len(stats.linears) == 2 * 7
    alphas = q.quantize_model(model, stats, "awq", q.group_quantizer(3, 16), 0.01, grid=4)
    assert len(alphas) == 14
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {f"model.{n}.weight" for n in stats.linears}
    with pytest.raises(ValueError, match="unknown quantization"):
        q.quantize_model(model, stats, "gptq", q.group_quantizer(3, 16), 0.01, grid=4)
