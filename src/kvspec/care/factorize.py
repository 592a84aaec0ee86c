"""Low-rank factorization of one K or V projection: weight SVD, ASVD and CARE.

Every method decomposes a *weighted* matrix M = S·Wᵀ, keeps the top-r singular triplets and
undoes the weighting, so that X·Wᵀ ≈ (X·A)·B with A (d, r) and B (r, out):

* ``svd``:  S = I. Minimises the weight-space error ‖Wᵀ − Ŵ‖_F.
* ``asvd``: S = diag(mean|x|^alpha). A cheap per-channel activation-aware scaling.
* ``care``: S = √C_λ with C_λ = (1−α)C + αλI. Minimises the activation-space error
  ‖√C_λ(Wᵀ − Ŵ)‖_F, i.e. the expected ‖X(Wᵀ − Ŵ)‖² under the (shrunk) input covariance.
  The shrinkage (`SHRINKAGES`): ``lambda_max`` λ = lam_frac·λ_max(C) (the thesis's form);
  ``mean_diag`` C + lam_frac·mean(diag C)·I (the released CARE code's `percdamp` damping, α
  unused); ``none`` C itself.

W is in torch ``nn.Linear`` layout (out, d). The singular values of M are returned too,
because the water-filling rank allocator compares them across matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from kvspec.care.vocabulary import FACTORIZATIONS

Method = Literal["svd", "asvd", "care"]
METHODS: tuple[str, ...] = FACTORIZATIONS
SHRINKAGES = ("lambda_max", "mean_diag", "none")


@dataclass(frozen=True)
class Factors:
    """Low-rank factors with X·Wᵀ ≈ (X·a)·b, plus the spectrum of the decomposed matrix."""

    a: Tensor  # (d, r), dtype of W
    b: Tensor  # (r, out), dtype of W
    spectrum: Tensor  # (k,) float64, descending; k = min(d, out) for exact SVD


@dataclass(frozen=True)
class Weighting:
    """Left weighting S (d, d) of Wᵀ and its inverse, both float64."""

    s: Tensor  # (d, d)
    s_inv: Tensor  # (d, d)


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown factorization method {method!r}; expected one of {METHODS}")


def _check_weight(weight: Tensor) -> None:
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (out, in), got shape {tuple(weight.shape)}")
    if not torch.isfinite(weight).all():
        raise ValueError("weight contains NaN or Inf")


def _check_rank(rank: int, weight: Tensor) -> None:
    limit = min(weight.shape)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= limit:
        raise ValueError(
            f"rank must be an int in [1, {limit}] for weight {tuple(weight.shape)}, got {rank!r}"
        )


def care_weighting(
    cov: Tensor, alpha: float = 0.05, lam_frac: float = 1e-2, shrinkage: str = "lambda_max"
) -> Weighting:
    """√C_λ and its inverse for the shrunk covariance C_λ (see the module text): by default
    (1−α)C + αλI with λ = lam_frac · λ_max(C).

    The shrinkage keeps √C_λ invertible (calibration covariances are often rank deficient) while
    leaving the dominant activation directions untouched.
    """
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"covariance must be square (d, d), got shape {tuple(cov.shape)}")
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must lie in [0, 1) (the thesis uses 0.01-0.1), got {alpha}")
    if lam_frac < 0.0:
        raise ValueError(f"lam_frac must be >= 0, got {lam_frac}")
    c = cov.to(torch.float64)
    c = (c + c.T) / 2  # symmetrize away accumulation round-off
    evals, evecs = torch.linalg.eigh(c)  # ascending; evecs (d, d)
    top = float(evals[-1].clamp_min(0.0))
    if top <= 0.0:
        raise ValueError("covariance is zero: no calibration activations were recorded")
    shrunk = _shrunk(evals.clamp_min(0.0), alpha, lam_frac, shrinkage)  # (d,)
    shrunk = shrunk.clamp_min(top * 1e-12)  # only bites without shrinkage
    root = shrunk.sqrt()
    return Weighting(s=(evecs * root) @ evecs.T, s_inv=(evecs / root) @ evecs.T)


def _shrunk(evals: Tensor, alpha: float, lam_frac: float, shrinkage: str) -> Tensor:
    """Eigenvalues of C_λ from those of C (C_λ shares C's eigenvectors in every form)."""
    if shrinkage == "lambda_max":
        return (1.0 - alpha) * evals + alpha * lam_frac * float(evals[-1])
    if shrinkage == "mean_diag":  # trace / d = mean of diag C
        return evals + lam_frac * float(evals.mean())
    if shrinkage == "none":
        return evals
    raise ValueError(f"shrinkage must be one of {SHRINKAGES}, got {shrinkage!r}")


def asvd_weighting(mean_abs: Tensor, alpha: float = 0.5) -> Weighting:
    """Diagonal S = diag(mean|x|^alpha) (ASVD), floored so S stays invertible."""
    if mean_abs.ndim != 1:
        raise ValueError(f"mean_abs must be 1-D (d,), got shape {tuple(mean_abs.shape)}")
    scale = mean_abs.to(torch.float64).clamp_min(0.0) ** alpha  # (d,)
    top = float(scale.max()) if scale.numel() else 0.0
    if top <= 0.0:
        raise ValueError("mean_abs is zero: no calibration activations were recorded")
    scale = scale.clamp_min(top * 1e-8)
    return Weighting(s=torch.diag(scale), s_inv=torch.diag(1.0 / scale))


def weighting_for(
    method: str,
    d: int,
    cov: Tensor | None = None,
    mean_abs: Tensor | None = None,
    alpha: float = 0.05,
    lam_frac: float = 1e-2,
    asvd_alpha: float = 0.5,
    shrinkage: str = "lambda_max",
) -> Weighting:
    """The left weighting S used by `method` for inputs of width `d`."""
    _check_method(method)
    if method == "svd":
        eye = torch.eye(d, dtype=torch.float64)
        return Weighting(s=eye, s_inv=eye)
    if method == "asvd":
        if mean_abs is None:
            raise ValueError("method 'asvd' needs mean_abs (per-channel mean |x|) from calibration")
        weighting = asvd_weighting(mean_abs, asvd_alpha)
    else:
        if cov is None:
            raise ValueError("method 'care' needs the input covariance C from calibration")
        weighting = care_weighting(cov, alpha, lam_frac, shrinkage)
    if weighting.s.shape[0] != d:
        raise ValueError(
            f"calibration statistics have width {weighting.s.shape[0]}, weight has {d}"
        )
    return weighting


def randomized_svd(
    m: Tensor, rank: int, oversample: int = 10, power_iters: int = 2, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """Top-(rank+oversample) SVD of `m` by a seeded Gaussian sketch (Halko et al.), in float32.

    Returns U (m, k), S (k,), Vh (k, n) with k = min(rank + oversample, min(m.shape)).
    """
    m = m.to(torch.float32)
    k = min(rank + oversample, min(m.shape))
    gen = torch.Generator(device=m.device).manual_seed(seed)
    sketch = torch.randn(m.shape[1], k, generator=gen, device=m.device, dtype=m.dtype)  # (n, k)
    q, _ = torch.linalg.qr(m @ sketch)  # (m, k): basis of the range of m
    for _ in range(power_iters):  # sharpen the basis when the spectrum decays slowly
        p, _ = torch.linalg.qr(m.T @ q)  # (n, k)
        q, _ = torch.linalg.qr(m @ p)  # (m, k)
    u_small, s, vh = torch.linalg.svd(q.T @ m, full_matrices=False)  # (k, k), (k,), (k, n)
    return q @ u_small, s, vh


def _svd(m: Tensor, rank: int, randomized: bool, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    if randomized:
        u, s, vh = randomized_svd(m, rank, seed=seed)
        return u.double(), s.double(), vh.double()
    return torch.linalg.svd(m, full_matrices=False)  # float64 in, float64 out


def factorize(
    weight: Tensor,
    rank: int,
    method: Method = "svd",
    *,
    cov: Tensor | None = None,
    mean_abs: Tensor | None = None,
    alpha: float = 0.05,
    lam_frac: float = 1e-2,
    asvd_alpha: float = 0.5,
    randomized: bool = False,
    seed: int = 0,
    shrinkage: str = "lambda_max",
) -> Factors:
    """Rank-`rank` factors of W (out, d) so that X·Wᵀ ≈ (X·A)·B, by `method`.

    `cov` (d, d) is required for ``care`` and `mean_abs` (d,) for ``asvd``. Exact float64 SVD by
    default; ``randomized=True`` uses a seeded fp32 sketch (then `spectrum` holds only the
    rank+10 leading singular values).
    """
    _check_method(method)
    _check_weight(weight)
    _check_rank(rank, weight)
    w = weight.detach().to(torch.float64)  # (out, d)
    wt = weighting_for(method, w.shape[1], cov, mean_abs, alpha, lam_frac, asvd_alpha, shrinkage)
    u, s, vh = _svd(wt.s @ w.T, rank, randomized, seed)  # (d, k), (k,), (k, out)
    a = wt.s_inv @ (u[:, :rank] * s[:rank])  # (d, r)
    b = vh[:rank]  # (r, out)
    return Factors(a=a.to(weight.dtype), b=b.to(weight.dtype), spectrum=s.detach().clone())


def weighted_spectrum(
    weight: Tensor,
    method: Method = "svd",
    *,
    cov: Tensor | None = None,
    mean_abs: Tensor | None = None,
    alpha: float = 0.05,
    lam_frac: float = 1e-2,
    asvd_alpha: float = 0.5,
    shrinkage: str = "lambda_max",
) -> Tensor:
    """All min(d, out) singular values (float64, descending) of the matrix `method` decomposes."""
    _check_method(method)
    _check_weight(weight)
    w = weight.detach().to(torch.float64)  # (out, d)
    wt = weighting_for(method, w.shape[1], cov, mean_abs, alpha, lam_frac, asvd_alpha, shrinkage)
    return torch.linalg.svdvals(wt.s @ w.T)


def activation_error(weight: Tensor, factors: Factors, cov: Tensor) -> float:
    """‖√C (Wᵀ − A·B)‖_F, the root of the expected squared output error under covariance C."""
    diff = weight.detach().to(torch.float64).T - factors.a.double() @ factors.b.double()  # (d, out)
    return float(torch.sqrt(torch.trace(diff.T @ cov.to(torch.float64) @ diff).clamp_min(0.0)))
