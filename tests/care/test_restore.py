"""Full MLA restoration (kvspec.care.restore): exactness where the layout allows it, the
RoRoPE rotation's algebra, the cache budget, and clear refusals."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from kvspec.care.allocate import retained_energy
from kvspec.care.factorize import factorize
from kvspec.care.restore import (
    RestoreSpec,
    kv_cache_per_token,
    latent_rank,
    latent_spectrum,
    layer_latent,
    output_pca,
    restore_model,
    rope_per_group,
    rorope_rotation,
)

HIDDEN, HEAD = 64, 16


def _llama(kv_heads: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        head_dim=HEAD,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(cfg).eval()


def _covs(n_layers: int, seed: int = 1) -> list[torch.Tensor]:
    """Non-isotropic input covariances (a random mixing of scaled channels)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_layers):
        mix = torch.randn(HIDDEN, HIDDEN, generator=gen, dtype=torch.float64)
        x = torch.randn(2000, HIDDEN, generator=gen, dtype=torch.float64) @ mix
        x *= torch.logspace(0, -2, HIDDEN, dtype=torch.float64)
        out.append(x.T @ x / len(x))
    return out


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _without_latent_norm(model):
    for layer in model.model.layers:
        layer.self_attn.kv_a_layernorm = torch.nn.Identity()
    return model


@pytest.mark.parametrize("method", ["transmla", "transmla-pca", "transmla-care"])
def test_full_rank_restoration_reproduces_the_llama_logits(method: str) -> None:
    """With one KV head and freqfold 1 every key component keeps its RoPE, and a full-rank
    latent holds V exactly: DeepSeek-V3 attention then equals the original up to the latent
    RMSNorm, which has no linear equivalent and is bypassed here."""
    llama = _llama(kv_heads=1)
    restored = restore_model(llama, _covs(2), RestoreSpec(method, kv_lora_rank=HEAD))
    ids = torch.randint(0, 64, (2, 24))
    diff = (_logits(_without_latent_norm(restored), ids) - _logits(llama, ids)).abs().max()
    assert diff < 1e-4


def test_saved_restoration_loads_as_deepseek_v3(tmp_path) -> None:
    llama = _llama(kv_heads=2)
    restored = restore_model(llama, _covs(2), RestoreSpec("transmla-care", kv_lora_rank=40))
    restored.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded).__name__ == "DeepseekV3ForCausalLM"
    ids = torch.randint(0, 64, (2, 24))
    assert torch.equal(_logits(loaded, ids), _logits(restored, ids))


def test_restored_model_is_close_and_degrades_with_rank() -> None:
    """Two KV heads: dropping RoPE on the non-leading components makes the restoration
    approximate (latent norm bypassed); cutting the latent makes it worse."""
    llama = _llama(kv_heads=2)
    ids = torch.randint(0, 64, (2, 24))
    ref = _logits(llama, ids)
    errs = {}
    for r in (48, 8):
        restored = restore_model(llama, _covs(2), RestoreSpec("transmla", r))
        errs[r] = (_logits(_without_latent_norm(restored), ids) - ref).abs().mean().item()
    assert errs[48] < errs[8]
    assert errs[48] < 0.1 * ref.abs().mean().item()


@pytest.mark.parametrize("freqfold", [1, 2, 4])
def test_rorope_rotation_is_orthogonal_and_commutes_with_rope(freqfold: int) -> None:
    g, d = 2, HEAD
    wk = torch.randn(g * d, HIDDEN, dtype=torch.float64)
    rot, d_rope = rorope_rotation(wk @ _covs(1)[0] @ wk.T, g, d, freqfold)
    assert d_rope == d // freqfold
    assert torch.allclose(rot @ rot.T, torch.eye(g * d, dtype=torch.float64), atol=1e-10)
    if freqfold == 1:  # same angle for every component of a group: R·RoPE = RoPE·R exactly
        k = torch.randn(g * d, dtype=torch.float64)
        assert torch.allclose(rot @ _rope_all(k, g, d, 7), _rope_rows(rot @ k, rot, g, d, 7))


def _angles(d: int, pos: int) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    return pos * inv  # (d/2,)


def _rope_all(k: torch.Tensor, g: int, d: int, pos: int) -> torch.Tensor:
    """Llama RoPE on each of the g heads of k̃."""
    out = k.clone().view(g, d)
    a = _angles(d, pos)
    re, im = out[:, : d // 2].clone(), out[:, d // 2 :].clone()
    out[:, : d // 2] = re * a.cos() - im * a.sin()
    out[:, d // 2 :] = re * a.sin() + im * a.cos()
    return out.reshape(-1)


def _rope_rows(v: torch.Tensor, rot: torch.Tensor, g: int, d: int, pos: int) -> torch.Tensor:
    """RoPE on rotated components: each row's frequency is that of the entries it mixes."""
    freq = torch.zeros(g * d, dtype=torch.long)
    idx = torch.arange(g * d) % d
    for n, row in enumerate(rot):
        freq[n] = idx[row.abs().argmax()] % (d // 2)
    is_re = torch.tensor([bool(idx[row.abs().argmax()] < d // 2) for row in rot])
    a = _angles(d, pos)[freq]
    out = v.clone()
    for n in range(g * d):
        if not is_re[n]:
            continue
        partner = next(
            m for m in range(g * d) if not is_re[m] and torch.allclose(rot[m].roll(-d // 2), rot[n])
        )
        out[n] = v[n] * a[n].cos() - v[partner] * a[n].sin()
        out[partner] = v[n] * a[n].sin() + v[partner] * a[n].cos()
    return out


def test_cache_per_token_matches_the_rank_budget() -> None:
    llama = _llama(kv_heads=2)
    for rank, freqfold in ((16, 4), (16, 2), (8, 4)):
        lat = latent_rank(llama.config, rank, freqfold)
        restored = restore_model(llama, _covs(2), RestoreSpec("transmla", lat, freqfold))
        assert kv_cache_per_token(restored.config)["per_layer"] == 2 * rank


def test_official_cache_convention_is_kv_lora_rank_r_plus_the_rope_key() -> None:
    llama = _llama(kv_heads=2)
    for rank, freqfold in ((16, 4), (8, 2)):
        lat = latent_rank(llama.config, rank, freqfold, cache="official")
        assert lat == rank
        restored = restore_model(llama, _covs(2), RestoreSpec("transmla", lat, freqfold))
        assert kv_cache_per_token(restored.config)["per_layer"] == rank + HEAD // freqfold
    with pytest.raises(ValueError, match="cache convention"):
        latent_rank(llama.config, 16, 2, cache="half")


def test_latent_norm_starts_as_identity_on_an_average_token() -> None:
    """kv_a_layernorm's weight is the latent's calibration RMS."""
    llama, covs = _llama(kv_heads=2), _covs(2)
    restored = restore_model(llama, covs, RestoreSpec("transmla-care", 24))
    attn = restored.model.layers[0].self_attn
    chol = torch.linalg.cholesky(covs[0])
    x = (torch.randn(4000, HIDDEN, dtype=torch.float64) @ chol.T).float()
    latent = attn.kv_a_proj_with_mqa(x)[:, :24]
    rms = latent.pow(2).mean().sqrt()
    assert attn.kv_a_layernorm.weight.detach() == pytest.approx(
        torch.full((24,), rms.item()), rel=0.05
    )


def test_refuses_what_deepseek_v3_cannot_hold() -> None:
    qwen = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=64,
            hidden_size=HIDDEN,
            intermediate_size=96,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=HEAD,
        )
    )
    with pytest.raises(ValueError, match="QK|q/k RMSNorm"):
        restore_model(qwen, _covs(1), RestoreSpec("transmla", 8))
    llama = _llama(kv_heads=2)
    with pytest.raises(ValueError, match="covariances for 2 layers"):
        restore_model(llama, _covs(1), RestoreSpec("transmla", 8))
    with pytest.raises(ValueError, match="freqfold"):
        latent_rank(llama.config, 16, 3)
    with pytest.raises(ValueError, match="must divide freqfold"):
        RestoreSpec("transmla", 8, freqfold=4, rope_per_group=3)
    assert rope_per_group(HEAD, 4, HEAD // 2) == 2
    with pytest.raises(ValueError, match="RoPE key of 6 dims"):
        rope_per_group(HEAD, 4, 6)
    with pytest.raises(ValueError, match="restore method"):
        RestoreSpec("svd", 8)


def _keys_only_on(llama, keep) -> LlamaForCausalLM:
    """Zero the key weights of every (KV head, frequency) pair where keep(head, freq) is false
    (both the real row i and the imaginary row i + d/2 of the rotate_half layout)."""
    with torch.no_grad():
        for layer in llama.model.layers:
            wk = layer.self_attn.k_proj.weight.view(-1, HEAD, HIDDEN)
            for head in range(wk.shape[0]):
                for freq in range(HEAD // 2):
                    if not keep(head, freq):
                        wk[head, [freq, freq + HEAD // 2]] = 0.0
    return llama


def _orthogonal_keys(llama) -> LlamaForCausalLM:
    """Key rows orthogonal with distinct norms (distinct principal components under C = I)."""
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in llama.model.layers:
            wk = layer.self_attn.k_proj.weight  # (g·d, D)
            q, _ = torch.linalg.qr(torch.randn(HIDDEN, wk.shape[0], generator=gen))
            wk.copy_(q.T * torch.linspace(1.0, 2.0, wk.shape[0])[:, None])
    return llama


@pytest.mark.parametrize(
    ("freqfold", "per_group"), [(1, 1), (2, 1), (4, 1), (4, 2), (8, 2), (2, 2)]
)
def test_freqfold_restoration_is_exact_when_keys_live_on_the_kept_frequencies(
    freqfold: int, per_group: int
) -> None:
    """Keys only on frequencies j·freqfold + c·freqfold/per_group (c < per_group): each group's
    second moment has rank per_group, its kept components are those frequencies, and the
    decoupled RoPE key must turn each at exactly its own. A grouping, slot order or frequency
    table that is off by one frequency breaks the equality. (4, 2) is TransMLA's Llama default:
    a RoPE key of half the head width with freqfold 4."""
    step = freqfold // per_group
    llama = _keys_only_on(_orthogonal_keys(_llama(kv_heads=1)), lambda h, f: f % step == 0)
    spec = RestoreSpec("transmla", HEAD, freqfold, rope_per_group=per_group)
    # white inputs and orthogonal key rows: kept frequencies are uncorrelated, so the group's
    # principal components are the frequencies themselves (else PCA mixes them: approximate)
    restored = restore_model(llama, [torch.eye(HIDDEN, dtype=torch.float64)] * 2, spec)
    assert restored.config.qk_rope_head_dim == per_group * HEAD // freqfold
    ids = torch.randint(0, 64, (2, 24))
    diff = (_logits(_without_latent_norm(restored), ids) - _logits(llama, ids)).abs().max()
    assert diff < 1e-4


@pytest.mark.parametrize("method", ["transmla", "transmla-care"])
def test_full_rank_restoration_with_several_kv_heads_is_exact_where_the_layout_allows(
    method: str,
) -> None:
    """Two KV heads whose keys use disjoint frequencies (head 0 even, head 1 odd): each group
    holds one key component, RoPE is kept on it, and a full-rank latent (g·d) holds both
    heads' values, so the restoration is exact; with both heads on every frequency the
    dropped RoPE on the second component makes it inexact."""
    ids = torch.randint(0, 64, (2, 24))
    split = _keys_only_on(_llama(kv_heads=2), lambda head, freq: freq % 2 == head)
    restored = restore_model(split, _covs(2), RestoreSpec(method, 2 * HEAD))
    exact = (_logits(_without_latent_norm(restored), ids) - _logits(split, ids)).abs().max()
    assert exact < 1e-4
    full = _llama(kv_heads=2)
    restored = restore_model(full, _covs(2), RestoreSpec(method, 2 * HEAD + HEAD))
    inexact = (_logits(_without_latent_norm(restored), ids) - _logits(full, ids)).abs().max()
    assert inexact > 100 * exact


@pytest.mark.parametrize("scaling", [None, "llama3"])
@pytest.mark.parametrize("freqfold", [1, 2, 4])
def test_decoupled_rope_key_turns_at_each_groups_first_frequency(freqfold: int, scaling) -> None:
    """The DeepSeek-V3 rotary table over d/freqfold dims equals the source table's every
    freqfold-th entry (also under Llama-3's frequency-dependent rope scaling)."""
    llama = _llama(kv_heads=2)
    if scaling:
        llama.config.rope_parameters = {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }  # fmt: skip
        llama = LlamaForCausalLM(llama.config).eval()
    lat = latent_rank(llama.config, 16, freqfold)
    restored = restore_model(llama, _covs(2), RestoreSpec("transmla", lat, freqfold))
    source = llama.model.rotary_emb.inv_freq
    target = restored.model.rotary_emb.inv_freq
    assert len(target) == HEAD // 2 // freqfold
    torch.testing.assert_close(target, source[::freqfold], rtol=1e-6, atol=0)
    if scaling:  # frequency-dependent: the table is no longer geometric, so the test sees it
        ratios = source[1:] / source[:-1]
        assert not torch.allclose(ratios, ratios[0].expand_as(ratios))


def test_output_pca_is_the_activation_optimal_rank_r_map() -> None:
    """E‖Z·x − ŷ‖² of the PCA restoration equals the sum of the discarded eigenvalues of Z C Zᵀ
    and is no larger than the weight-space SVD's; full rank is exact."""
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(24, HIDDEN, generator=gen, dtype=torch.float64)
    cov = _covs(1)[0]
    evals = torch.linalg.eigvalsh(z @ cov @ z.T).flip(0)

    def error(a, b) -> float:
        residual = z - (a @ b).T  # (out, D)
        return torch.trace(residual @ cov @ residual.T).item()

    for rank in (4, 12):
        a, b = output_pca(z, cov, rank)
        assert error(a, b) == pytest.approx(evals[rank:].sum().item(), rel=1e-9)
        svd = factorize(z, rank, "svd")
        assert error(a, b) < error(svd.a.double(), svd.b.double())
    a, b = output_pca(z, cov, 24)
    assert error(a, b) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("method", ["transmla", "transmla-pca", "transmla-care"])
def test_waterfilled_latent_ranks_keep_the_budget_and_pad_with_zeros(method: str) -> None:
    """Per-layer latent ranks water-filled on each method's own spectrum: same total cache,
    at least the uniform ranks' retained energy, zero-padded to one kv_lora_rank."""
    llama = _llama(kv_heads=2)
    with torch.no_grad():
        llama.model.layers[1].self_attn.v_proj.weight.mul_(10.0)  # layer 1 needs more rank
    covs, lat = _covs(2), 20
    spec = RestoreSpec(method, lat, 2, schedule="waterfill")
    restored = restore_model(llama, covs, spec)
    ranks = restored.config.kvspec_latent_ranks
    assert sum(ranks) == 2 * lat and ranks[1] > ranks[0]
    assert restored.config.kv_lora_rank == max(ranks)
    assert kv_cache_per_token(restored.config)["total"] == 2 * lat + 2 * HEAD // 2
    latents = [
        layer_latent(layer.self_attn, c, spec, (4, 2, HEAD))
        for layer, c in zip(llama.model.layers, covs, strict=True)
    ]
    spectra = [latent_spectrum(x, c, spec) for x, c in zip(latents, covs, strict=True)]
    assert retained_energy(spectra, ranks) >= retained_energy(spectra, [lat, lat])
    a = restored.model.layers[0].self_attn.kv_a_proj_with_mqa.weight
    assert a[ranks[0] : max(ranks)].abs().max() == 0  # padded latent rows


def test_padded_latent_components_get_no_gradient() -> None:
    """Healing cannot grow the cache: the padded rows of kv_a_proj and columns of kv_b_proj
    are zero on both sides of the latent RMSNorm, so their gradients are exactly zero."""
    llama = _llama(kv_heads=2)
    with torch.no_grad():
        llama.model.layers[1].self_attn.v_proj.weight.mul_(10.0)
    restored = restore_model(
        llama, _covs(2), RestoreSpec("transmla-care", 20, 2, schedule="waterfill")
    )
    ranks, width = restored.config.kvspec_latent_ranks, restored.config.kv_lora_rank
    assert min(ranks) < width  # some layer is padded
    restored.train()
    ids = torch.randint(0, 64, (2, 12))
    restored(ids, labels=ids).loss.backward()
    for layer, rank in zip(restored.model.layers, ranks, strict=True):
        attn = layer.self_attn
        assert attn.kv_a_proj_with_mqa.weight.grad[rank:width].abs().sum() == 0
        assert attn.kv_b_proj.weight.grad[:, rank:width].abs().sum() == 0
        assert attn.kv_a_proj_with_mqa.weight.grad[:rank].abs().max() > 0


def test_care_without_shrinkage_is_transmla_pca() -> None:
    """The identity behind the Table 3.3 ablation: the SVD of √C·Zᵀ has the eigenvectors of
    Z·C·Zᵀ as right singular vectors and gives A = Zᵀ·U, so CARE's restoration without
    shrinkage (same covariance, uniform ranks) is TransMLA's PCA one; with the thesis's
    λ_max-scaled shrinkage it is not."""
    llama, covs, ids = _llama(kv_heads=2), _covs(2), torch.randint(0, 64, (2, 24))
    llama = llama.double()
    pca = _logits(restore_model(llama, covs, RestoreSpec("transmla-pca", 12, 2)), ids)
    for shrinkage, same in (("none", True), ("lambda_max", False), ("mean_diag", False)):
        spec = RestoreSpec("transmla-care", 12, 2, shrinkage=shrinkage, care_alpha=0.05)
        diff = (_logits(restore_model(llama, covs, spec), ids) - pca).abs().max()
        assert (diff < 1e-9) == same, (shrinkage, float(diff))


def test_rank_bounds_keep_every_layer_inside_and_the_budget() -> None:
    llama = _llama(kv_heads=2)
    with torch.no_grad():
        llama.model.layers[1].self_attn.v_proj.weight.mul_(100.0)  # layer 0 would starve
    covs, lat = _covs(2), 20
    free = restore_model(llama, covs, RestoreSpec("transmla-care", lat, 2, schedule="waterfill"))
    bounded = RestoreSpec("transmla-care", lat, 2, schedule="waterfill", rank_bounds=(0.75, 2.0))
    ranks = restore_model(llama, covs, bounded).config.kvspec_latent_ranks
    assert min(free.config.kvspec_latent_ranks) < 15
    assert sum(ranks) == 2 * lat and min(ranks) == 15
    with pytest.raises(ValueError, match="rank_bounds"):
        RestoreSpec("transmla-care", lat, 2, schedule="waterfill", rank_bounds=(1.5, 2.0))
    with pytest.raises(ValueError, match="shrinkage"):
        RestoreSpec("transmla-care", lat, 2, shrinkage="ridge")
