"""Math of the low-rank factorizations: exactness at full rank, optimality of CARE, validation."""

from __future__ import annotations

import pytest
import torch

from kvspec.care.factorize import (
    METHODS,
    activation_error,
    care_weighting,
    factorize,
    randomized_svd,
    weighted_spectrum,
)

D, OUT = 48, 32  # input width d, output width g_h·d_h


def _anisotropic_data(seed: int = 0, n: int = 4000) -> torch.Tensor:
    """Rows x (n, D) with a rotated, strongly non-isotropic covariance (eigenvalues 1e-4..1e2)."""
    gen = torch.Generator().manual_seed(seed)
    rotation, _ = torch.linalg.qr(torch.randn(D, D, generator=gen, dtype=torch.float64))
    scales = torch.logspace(-2, 1, D, dtype=torch.float64)  # std per principal direction
    z = torch.randn(n, D, generator=gen, dtype=torch.float64)
    return (z * scales) @ rotation.T + 0.3  # non-zero mean as in real activations


@pytest.fixture(scope="module")
def problem() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = _anisotropic_data()
    return {
        "w": torch.randn(OUT, D, generator=gen, dtype=torch.float64),
        "cov": x.T @ x / x.shape[0],
        "mean_abs": x.abs().mean(0),
    }


def _stats(problem: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"cov": problem["cov"], "mean_abs": problem["mean_abs"]}


@pytest.mark.parametrize("method", METHODS)
def test_full_rank_reproduces_weight(problem, method):
    f = factorize(problem["w"], OUT, method, **_stats(problem))
    assert f.a.shape == (D, OUT) and f.b.shape == (OUT, OUT)
    torch.testing.assert_close(f.a @ f.b, problem["w"].T, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_shapes_dtype_and_spectrum(problem, method):
    w32 = problem["w"].float()
    f = factorize(w32, 5, method, **_stats(problem))
    assert f.a.shape == (D, 5) and f.b.shape == (5, OUT)
    assert f.a.dtype == torch.float32 and f.b.dtype == torch.float32
    assert f.spectrum.dtype == torch.float64 and f.spectrum.shape == (OUT,)
    assert torch.all(f.spectrum[:-1] >= f.spectrum[1:])
    torch.testing.assert_close(
        f.spectrum, weighted_spectrum(w32, method, **_stats(problem)), atol=1e-9, rtol=1e-9
    )


@pytest.mark.parametrize("rank", [2, 4, 8, 16, 24])
def test_care_has_lowest_activation_error(problem, rank):
    errors = {
        m: activation_error(
            problem["w"], factorize(problem["w"], rank, m, **_stats(problem)), problem["cov"]
        )
        for m in METHODS
    }
    assert errors["care"] <= errors["svd"] * (1 + 1e-9)
    assert errors["care"] <= errors["asvd"] * (1 + 1e-9)
    assert errors["care"] < 0.9 * errors["svd"]  # strongly anisotropic data: a real gap


@pytest.mark.parametrize("rank", [1, 6, 20])
def test_unregularized_care_attains_eckart_young_bound(problem, rank):
    """With α = 0 CARE is the exact minimiser: error² = Σ_{i>r} σ_i²(√C·Wᵀ)."""
    f = factorize(problem["w"], rank, "care", cov=problem["cov"], alpha=0.0)
    bound = float(f.spectrum[rank:].square().sum().sqrt())
    assert activation_error(problem["w"], f, problem["cov"]) == pytest.approx(bound, rel=1e-8)


def test_svd_minimises_weight_error(problem):
    f = factorize(problem["w"], 7, "svd")
    weight_error = torch.linalg.norm(problem["w"].T - f.a @ f.b)
    assert float(weight_error) == pytest.approx(
        float(f.spectrum[7:].square().sum().sqrt()), rel=1e-9
    )


def test_care_weighting_is_shrunk_square_root(problem):
    alpha, lam_frac = 0.05, 1e-2
    wt = care_weighting(problem["cov"], alpha, lam_frac)
    top = float(torch.linalg.eigvalsh(problem["cov"])[-1])
    c_lam = (1 - alpha) * problem["cov"] + alpha * lam_frac * top * torch.eye(
        D, dtype=torch.float64
    )
    torch.testing.assert_close(wt.s @ wt.s, c_lam, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(
        wt.s @ wt.s_inv, torch.eye(D, dtype=torch.float64), atol=1e-9, rtol=0
    )


@pytest.mark.parametrize("shrinkage", ["mean_diag", "none"])
def test_other_shrinkages_are_the_released_damping_and_none(problem, shrinkage):
    """mean_diag: C + lam_frac·mean(diag C)·I (the released CARE code's percdamp; α unused);
    none: C itself."""
    cov, eye = problem["cov"], torch.eye(D, dtype=torch.float64)
    wt = care_weighting(cov, 0.05, 1e-2, shrinkage)
    damp = 1e-2 * float(torch.diagonal(cov).mean()) if shrinkage == "mean_diag" else 0.0
    torch.testing.assert_close(wt.s @ wt.s, cov + damp * eye, atol=1e-9, rtol=1e-9)
    with pytest.raises(ValueError, match="shrinkage"):
        care_weighting(cov, 0.05, 1e-2, "ridge")


def test_care_handles_rank_deficient_covariance(problem):
    x = _anisotropic_data(n=10)  # 10 samples in 48 dims: singular covariance
    f = factorize(problem["w"], OUT, "care", cov=x.T @ x / 10)
    torch.testing.assert_close(f.a @ f.b, problem["w"].T, atol=1e-7, rtol=1e-7)


def test_asvd_tolerates_dead_channels(problem):
    mean_abs = problem["mean_abs"].clone()
    mean_abs[:3] = 0.0
    f = factorize(problem["w"], OUT, "asvd", mean_abs=mean_abs)
    torch.testing.assert_close(f.a @ f.b, problem["w"].T, atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize("method", METHODS)
def test_randomized_matches_exact_and_is_seeded(problem, method):
    exact = factorize(problem["w"], 8, method, **_stats(problem))
    rand = factorize(problem["w"], 8, method, **_stats(problem), randomized=True, seed=3)
    again = factorize(problem["w"], 8, method, **_stats(problem), randomized=True, seed=3)
    assert torch.equal(rand.a, again.a) and torch.equal(rand.b, again.b)
    assert rand.spectrum.shape == (min(8 + 10, OUT),)
    err_exact = activation_error(problem["w"], exact, problem["cov"])
    err_rand = activation_error(problem["w"], rand, problem["cov"])
    assert err_rand == pytest.approx(err_exact, rel=0.02)
    torch.testing.assert_close(rand.spectrum[:8], exact.spectrum[:8], rtol=1e-3, atol=0)


def test_randomized_svd_recovers_low_rank_matrix():
    gen = torch.Generator().manual_seed(0)
    m = torch.randn(40, 5, generator=gen) @ torch.randn(5, 30, generator=gen)  # exactly rank 5
    u, s, vh = randomized_svd(m, 5, oversample=3)
    torch.testing.assert_close(u[:, :5] * s[:5] @ vh[:5], m, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("rank", [0, -1, OUT + 1, 2.0, True])
def test_bad_rank_raises(problem, rank):
    with pytest.raises(ValueError, match="rank must be an int"):
        factorize(problem["w"], rank, "svd")


def test_bad_inputs_raise(problem):
    w = problem["w"]
    with pytest.raises(ValueError, match="unknown factorization method"):
        factorize(w, 4, "pca")
    with pytest.raises(ValueError, match="needs the input covariance"):
        factorize(w, 4, "care")
    with pytest.raises(ValueError, match="needs mean_abs"):
        factorize(w, 4, "asvd")
    with pytest.raises(ValueError, match="must be square"):
        factorize(w, 4, "care", cov=torch.zeros(D, D + 1))
    with pytest.raises(ValueError, match="width"):
        factorize(w, 4, "care", cov=torch.eye(D + 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="alpha"):
        factorize(w, 4, "care", cov=problem["cov"], alpha=1.5)
    with pytest.raises(ValueError, match="covariance is zero"):
        factorize(w, 4, "care", cov=torch.zeros(D, D))
    with pytest.raises(ValueError, match="2-D"):
        factorize(w[0], 1, "svd")
    with pytest.raises(ValueError, match="NaN"):
        factorize(torch.full_like(w, float("nan")), 4, "svd")
