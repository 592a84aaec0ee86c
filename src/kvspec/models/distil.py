"""Draft models distilled from their target: sequence-level KD on the target's own greedy
responses, teacher-forced KD on other text, token-level KD on its top-k log-probabilities;
seeded and resumable.

    L = CE(z_S, y) + β·τ²·KL_k(p_T^τ ‖ p_S^τ)

y is the teacher's argmax at each learned position when its targets are computed (on an index
prompt + its own greedy response that is the next token, so CE there *is* sequence-level KD:
the draft learns what greedy verification accepts; on SFT text it is what the teacher would
have generated), else the sequence's next token. KL_k compares both distributions coarsened to
the teacher's top-k tokens plus one bucket for everything else: a lower bound of the full KL
(coarsening never increases a KL), exact when k covers the vocabulary, zero when student =
teacher. A draft with a reduced readout (`kvspec.models.draft_vocab`) learns over its N tokens:
positions whose label is outside are skipped and the teacher's mass outside joins the bucket.
The teacher's top-k log-probs are computed once per sequence and cached (shared by drafts of
one teacher with the same data), so each training step costs only a student pass. A draft
shares the teacher's tokenizer; it starts as the teacher cut to a few of its layers, or as
fresh layers on the teacher's embedding projected onto its top principal directions.
Every random choice is a function of (seed, step), so a run resumed from its state file
continues the uninterrupted run's curve and weights bit for bit.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as Sequence_
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from kvspec.io import atomic_path
from kvspec.models.draft_vocab import (
    attach_reduced_head,
    frequency_order,
    readout_logits,
    reduced_head,
    vocabulary_of,
)
from kvspec.models.kd_targets import Targets, batch_targets, overlap, restrict_targets
from kvspec.models.load import compute_dtype, resolve_dtype
from kvspec.models.optim import adamw, load_state, save_state, warmup_cosine
from kvspec.models.packing import Batch, make_batch
from kvspec.models.warm_start import WarmStart, warm_start
from kvspec.provenance import config_hash
from kvspec.seeds import derive, numpy_generator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistilSpec:
    """Optimisation settings (the `models.<name>.distil.train` block of the config)."""

    steps: int
    batch_size: int
    lr: float
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    beta: float = 1.0
    tau: float = 1.0
    top_k: int = 64
    freeze_embeddings: bool = False
    train_head: bool = False
    eval_every: int = 50
    ckpt_every: int = 50
    dtype: str = "float32"  # the student's training forward: float32, bfloat16 (autocast), auto
    seed: int = 0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], seed: int) -> DistilSpec:
        return cls(seed=seed, **cfg)


def lr_at(step: int, spec: DistilSpec) -> float:
    """Linear warmup to `lr`, then cosine decay to `min_lr_ratio·lr` at the last step."""
    decay = spec.steps - 1 - spec.warmup_steps
    return warmup_cosine(step, spec.lr, spec.warmup_steps, decay, spec.min_lr_ratio)


# ---------------------------------------------------------------- sequences


@dataclass(frozen=True)
class Sequence:
    """One training sequence: token ids, and the first position whose next token is learned
    (the last prompt token, whose successor is the first response token, unless the prompt
    is learned too)."""

    id: str
    ids: tuple[int, ...]
    start: int

    @property
    def n_targets(self) -> int:
        return len(self.ids) - 1 - self.start


def distil_sequences(
    records: Iterable[Mapping[str, Any]], *, max_len: int, prompt_loss: bool
) -> list[Sequence]:
    """Prompt + greedy response of every *index* record (its first `max_len` tokens); records
    of held-out splits never enter, nor do records without a learned token."""
    seqs = []
    for r in records:
        if r["split"] != "index" or not r["response_ids"]:
            continue
        ids = (list(r["prompt_ids"]) + list(r["response_ids"]))[:max_len]
        start = 0 if prompt_loss else len(r["prompt_ids"]) - 1
        if len(ids) - 1 > start:
            seqs.append(Sequence(str(r["id"]), tuple(int(t) for t in ids), start))
    return seqs


def split_sequences(
    seqs: list[Sequence], val_fraction: float, seed: int
) -> tuple[list[Sequence], list[Sequence]]:
    """(train, val): a seeded `val_fraction` of the sequences (at least one if the fraction
    is positive) held out for validation; both keep the input order."""
    n_val = min(len(seqs) - 1, max(1, round(val_fraction * len(seqs)))) if val_fraction else 0
    val_idx = set(numpy_generator(seed, "validation").permutation(len(seqs))[:n_val].tolist())
    train = [s for i, s in enumerate(seqs) if i not in val_idx]
    return train, [s for i, s in enumerate(seqs) if i in val_idx]


def batch_indices(n: int, spec: DistilSpec, step: int) -> list[int]:
    """Sequences of `step`: consecutive slices of seeded per-epoch permutations of n, so each
    epoch sees every sequence once and the choice depends only on (seed, step)."""
    perms: dict[int, np.ndarray] = {}
    out = []
    for pos in range(step * spec.batch_size, (step + 1) * spec.batch_size):
        epoch, i = divmod(pos, n)
        if epoch not in perms:
            perms[epoch] = numpy_generator(spec.seed, "epoch", epoch).permutation(n)
        out.append(int(perms[epoch][i]))
    return out


# ---------------------------------------------------------------- models


def student_config(arch: Mapping[str, Any], teacher_config: Any) -> Any:
    """An HF config for `arch` (a `distil.arch` block) with the teacher's vocabulary and
    special token ids, so that the two models' logits are comparable token by token."""
    from kvspec.models.build import hf_config

    ids = {k: getattr(teacher_config, k, None) for k in ("bos_token_id", "eos_token_id")}
    pad = getattr(teacher_config, "pad_token_id", None)
    return hf_config(arch, teacher_config.vocab_size, pad_token_id=pad, **ids)


def principal_projection(weight: torch.Tensor, rank: int) -> torch.Tensor:
    """(V, rank): the rows of `weight` (V, H) in the coordinates of its top-`rank` right
    singular directions (= U_r·S_r, the best rank-r approximation of the rows)."""
    if rank > weight.shape[1]:
        raise ValueError(f"cannot project width {weight.shape[1]} onto {rank} directions")
    _, _, vh = torch.linalg.svd(weight.double(), full_matrices=False)  # vh: (H, H)
    return (weight.double() @ vh[:rank].T).to(weight.dtype)  # (V, rank)


INITS = ("pca", "random", "target")


def build_student(
    arch: Mapping[str, Any],
    teacher: torch.nn.Module,
    seed: int,
    init: str = "pca",
    layers: Sequence_[int] | None = None,
) -> torch.nn.Module:
    """A seeded student for `arch`, with the teacher's generation settings (stop tokens).
    `init="pca"` starts its embeddings as the teacher's principal projections; `"target"`
    starts it as the teacher itself cut to the teacher's `layers` (embedding, those decoder
    layers in order, final norm and head: `arch` must describe that shape)."""
    from kvspec.models.build import ARCHITECTURES

    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if init == "target":
        return target_slice(teacher, arch, layers or []).train()
    torch.manual_seed(derive(seed, "init"))
    student = ARCHITECTURES[arch["family"]][1](student_config(arch, teacher.config))
    student.generation_config = copy.deepcopy(teacher.generation_config)
    if init == "pca":
        with torch.no_grad():
            emb = teacher.get_input_embeddings().weight
            rows = principal_projection(emb, arch["hidden"]).cpu()  # the student is built there
            student.get_input_embeddings().weight.copy_(rows)
            if not student.config.tie_word_embeddings:
                out = teacher.get_output_embeddings().weight
                head = principal_projection(out, arch["hidden"]).cpu()
                student.get_output_embeddings().weight.copy_(head)
    return student.train()


def target_slice(
    teacher: torch.nn.Module, arch: Mapping[str, Any], layers: Sequence_[int]
) -> torch.nn.Module:
    """A copy of `teacher` keeping only its decoder `layers` (in that order); checked
    against `arch` (hidden, intermediate, heads, kv_heads, layers) so the config describes
    the model that is built."""
    n = teacher.config.num_hidden_layers
    if not layers or any(not 0 <= i < n for i in layers) or len(set(layers)) != len(layers):
        raise ValueError(f"init target needs distinct teacher layers in 0..{n - 1}, got {layers}")
    shape = {"hidden": "hidden_size", "intermediate": "intermediate_size",
             "heads": "num_attention_heads", "kv_heads": "num_key_value_heads"}  # fmt: skip
    wrong = {k: (arch[k], getattr(teacher.config, a)) for k, a in shape.items()
             if arch[k] != getattr(teacher.config, a)}  # fmt: skip
    if len(layers) != arch["layers"]:
        wrong["layers"] = (arch["layers"], len(layers))
    if wrong:
        raise ValueError(f"arch disagrees with the teacher slice it describes: {wrong}")
    student = copy.deepcopy(teacher)
    decoder = student.base_model
    decoder.layers = torch.nn.ModuleList([decoder.layers[i] for i in layers])
    for new, layer in enumerate(decoder.layers):
        layer.self_attn.layer_idx = new
    config = student.config
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    config.num_hidden_layers = len(layers)
    return student


def learned_logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """The student's full-width logits at the learned positions only (N, V): the LM head,
    which dominates a small model's cost at a large vocabulary, skips prompt and padding."""
    hidden = batch.hidden(model)  # (R, W, H)
    return model.get_output_embeddings()(batch.learned(hidden))  # (N, V)


def learned_readout(
    model: torch.nn.Module, batch: Batch, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits (n, N) over the student's readout vocabulary, `labels` (N,) as indices of it,
    keep (N,) bool): with a reduced head (`kvspec.models.draft_vocab`) only the positions
    whose label is in its subset are kept, and only N logits are computed per position."""
    hidden = batch.learned(batch.hidden(model))  # (N, H)
    head = reduced_head(model)
    if head is None:
        keep = torch.ones_like(labels, dtype=torch.bool)
        return model.get_output_embeddings()(hidden), labels, keep
    mapped = head.to_draft()[labels]  # (N,)
    keep = mapped >= 0
    return head.reduced(hidden[keep]), mapped[keep], keep


# ---------------------------------------------------------------- teacher targets


@torch.no_grad()
def teacher_targets(
    teacher: torch.nn.Module,
    seqs: list[Sequence],
    *,
    top_k: int,
    tau: float,
    batch_size: int,
    pad_id: int = 0,
    dtype: str = "float32",
) -> tuple[dict[str, Targets], float]:
    """Per sequence id, the teacher's top-k log p^τ at every learned position and the log
    of the mass outside them; and the share of positions whose teacher argmax is the
    sequence's next token (≈ 1 on its own greedy responses: a check that both line up).
    Batches hold sequences of similar length (less padding). `dtype` "bfloat16" computes
    the forward under bfloat16 autocast (the weights stay as loaded; log-probs in float32)."""
    teacher.eval()
    out: dict[str, Targets] = {}
    hits = total = 0
    ordered = sorted(seqs, key=lambda s: len(s.ids))
    chunks = [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]
    for chunk in tqdm(chunks, desc="teacher", unit="batch", mininterval=10):
        batch = make_batch(chunk, pad_id).to(teacher.device)
        with compute_dtype(teacher.device, dtype):
            logits = output_logits(teacher, batch)
        logits = logits.float()  # (N, V)
        hits += int((logits.argmax(-1) == batch.labels).sum())
        total += len(batch.labels)
        top = tuple(t.cpu() for t in _topk(logits, top_k, tau))
        for s, rows in zip(chunk, _split_rows(top, chunk), strict=True):
            out[s.id] = rows
    return out, hits / max(1, total)


def output_logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """A full model's logits at the learned positions only (N, V), as its forward computes
    them (a final logit soft-cap included): the output layer skips prompt and padding."""
    hidden = batch.learned(batch.hidden(model))  # (N, H)
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def _topk(logits: torch.Tensor, top_k: int, tau: float) -> Targets:
    """(top-k ids, their log p^τ, log of the mass outside them) per row, overwriting `logits`.
    The top k of z = logits / τ are those of log p^τ; the rest is summed in place, shifted by
    the k-th largest z (every other one is below it), so the rows' logsumexp takes no
    log-softmax: four passes over (N, V) instead of eight (the teacher pass's top-k 0.24 ->
    0.09 s per 1,500 rows of SmolLM2's 49,152 words, 2026-12-07)."""
    z = logits.div_(tau) if tau != 1 else logits  # (N, V)
    top = z.topk(min(top_k, z.shape[-1]), dim=-1)  # (N, k)
    if top.values.shape[-1] == z.shape[-1]:
        logp = top.values - torch.logsumexp(top.values, dim=-1, keepdim=True)
        return top.indices, logp, torch.full_like(logp[:, 0], float("-inf"))
    shift = top.values[:, -1:]  # (N, 1)
    rest = z.sub_(shift).exp_().scatter_(-1, top.indices, 0.0).sum(-1).log() + shift[:, 0]
    lse = torch.logaddexp(torch.logsumexp(top.values, dim=-1), rest)  # (N,)
    return top.indices, top.values - lse[:, None], rest - lse


def _split_rows(targets: Targets, seqs: list[Sequence]) -> list[Targets]:
    sizes = [s.n_targets for s in seqs]
    parts = [t.split(sizes) for t in targets]
    return [tuple(p[i].clone() for p in parts) for i in range(len(seqs))]  # type: ignore[misc]


# ---------------------------------------------------------------- loss


def topk_kl(student_logits: torch.Tensor, targets: Targets, tau: float) -> torch.Tensor:
    """Mean over positions of KL(p_T^τ ‖ p_S^τ) on the teacher's top-k tokens plus one bucket
    for the rest of the vocabulary (the full KL when k covers it)."""
    return topk_kl_logp(F.log_softmax(student_logits.float() / tau, dim=-1), targets)


def topk_kl_logp(student_logp: torch.Tensor, targets: Targets) -> torch.Tensor:
    """`topk_kl` from the student's log-probabilities at τ (N, V). The student's rest mass is
    1 - its mass on the teacher's top k (in float64, floored at 1e-9 so that a student sure of
    those k tokens keeps a finite log): no second pass over the vocabulary. Entries whose
    teacher log-prob is -inf (tokens outside a reduced readout, see `restrict_targets`) are
    left out of the k and counted in the rest."""
    t_ids, t_logp, t_rest = targets
    s_top = student_logp.gather(-1, t_ids)  # (N, k)
    valid = torch.isfinite(t_logp)  # (N, k)
    terms = torch.where(valid, t_logp.exp() * (t_logp - s_top), torch.zeros_like(s_top))
    kl = terms.sum(-1)  # (N,)
    if t_ids.shape[-1] < student_logp.shape[-1] or not bool(valid.all()):
        covered = (s_top.double().exp() * valid).sum(-1)  # (N,)
        s_rest = torch.log1p(-covered.clamp(max=1 - 1e-9)).to(kl.dtype)  # (N,)
        kl = kl + t_rest.exp() * (t_rest - s_rest)
    return kl.mean()


def distil_loss(
    student: torch.nn.Module, batch: Batch, targets: Targets | None, spec: DistilSpec
) -> tuple[torch.Tensor, float, float]:
    """(L, CE, KL) on one batch. With teacher targets the CE's labels are the teacher's
    argmax (its top-1; on its own greedy responses = the next token, on other text what it
    would have generated), else the sequences' next tokens; without targets or at β = 0 L is
    the CE alone. At τ = 1 the CE and the KL share one log-softmax over the readout."""
    labels = targets[0][:, 0] if targets is not None else batch.labels
    logits, labels, keep = learned_readout(student, batch, labels)
    logits = logits.float()  # (n, N)
    logp = F.log_softmax(logits, dim=-1)  # (n, N)
    ce = F.nll_loss(logp, labels)
    if targets is None or spec.beta == 0:
        return ce, float(ce.detach()), 0.0
    at_tau = logp if spec.tau == 1 else F.log_softmax(logits / spec.tau, dim=-1)
    head = reduced_head(student)
    kd = topk_kl_logp(at_tau, restrict_targets(targets, keep, head.to_draft() if head else None))
    return ce + spec.beta * spec.tau**2 * kd, float(ce.detach()), float(kd.detach())


@torch.no_grad()
def evaluate(
    student: torch.nn.Module,
    seqs: list[Sequence],
    targets: Mapping[str, Targets] | None,
    spec: DistilSpec,
    pad_id: int = 0,
) -> dict[str, float]:
    """Token-weighted validation metrics on held-out greedy responses of the teacher:
    `val_match`, the share of positions where the draft's argmax is the teacher's greedy
    token (the per-token chance that greedy verification accepts it; a token outside a
    reduced readout is a miss); `val_coverage`, the share whose token the readout covers;
    `val_ce` on those; with teacher targets, `val_kl` and `val_alpha`, Σ min(p_T, q) over the
    teacher's top-k tokens at τ (a lower bound of the acceptance rate α of speculative
    sampling at temperature τ, tight when the top-k hold nearly all the teacher's mass)."""
    was_training = student.training
    student.eval()
    head = reduced_head(student)
    to_draft = head.to_draft() if head else None
    sums = dict.fromkeys(("ce", "kl", "alpha", "match", "coverage"), 0.0)
    total = 0
    for i in range(0, len(seqs), spec.batch_size):
        chunk = seqs[i : i + spec.batch_size]
        batch = make_batch(chunk, pad_id).to(student.device)
        hidden = batch.learned(batch.hidden(student))
        logits = readout_logits(student, hidden).float()
        labels = to_draft[batch.labels] if head else batch.labels  # (n,) -1 outside
        keep = labels >= 0
        sums["match"] += float((logits.argmax(-1) == labels).sum())
        sums["coverage"] += float(keep.sum())
        if keep.any():
            sums["ce"] += float(F.cross_entropy(logits[keep], labels[keep], reduction="sum"))
        if targets is not None:
            everything = torch.ones_like(keep)
            tgt = restrict_targets(batch_targets(targets, chunk, student.device), everything,
                                   to_draft)  # fmt: skip
            s_logp = F.log_softmax(logits / spec.tau, dim=-1)
            sums["kl"] += float(topk_kl_logp(s_logp, tgt)) * len(labels)
            sums["alpha"] += float(overlap(s_logp, tgt).sum())
        total += len(labels)
    student.train(was_training)
    out = {f"val_{k}": sums[k] / max(1, total) for k in ("kl", "alpha", "match", "coverage")}
    return {"val_ce": sums["ce"] / max(1.0, sums["coverage"]), **out}


# ---------------------------------------------------------------- loop


def distil_train(
    student: torch.nn.Module,
    train: list[Sequence],
    val: list[Sequence],
    spec: DistilSpec,
    targets: Mapping[str, Targets] | None = None,
    checkpoint: str | Path | None = None,
    fingerprint: str = "",
    pad_id: int = 0,
) -> list[dict[str, float]]:
    """Train the student in place; return the curve (one row per evaluation). Resumes from
    `checkpoint` if it holds a state of the same spec and `fingerprint` (architecture and
    data), and rewrites it every `ckpt_every` steps."""
    if not train:
        raise ValueError("no training sequences")
    torch.manual_seed(derive(spec.seed, "train"))
    ckpt = Path(checkpoint) if checkpoint else None
    if spec.freeze_embeddings:  # the input (and output) embeddings stay as built
        frozen = [student.get_input_embeddings()]
        if not spec.train_head:
            frozen.append(student.get_output_embeddings())
        for emb in frozen:
            emb.weight.requires_grad_(False)
    opt = adamw(student, spec.lr, spec.weight_decay, betas=(0.9, 0.95))
    tag = config_hash([asdict(spec), fingerprint])
    start, curve = load_state(ckpt, student, opt, tag)
    seen = np.cumsum([0] + [_step_targets(train, spec, s) for s in range(spec.steps)])
    student.train()
    t0 = time.perf_counter()
    bar = tqdm(range(start, spec.steps), desc="distil", mininterval=10, initial=start,
               total=spec.steps)  # fmt: skip
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        chunk = [train[i] for i in batch_indices(len(train), spec, step)]
        batch = make_batch(chunk, pad_id).to(student.device)
        tgt = batch_targets(targets, chunk, student.device) if targets is not None else None
        with compute_dtype(student.device, spec.dtype):  # weights, grads, AdamW stay float32
            loss, ce, kd = distil_loss(student, batch, tgt, spec)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), spec.grad_clip)
        opt.step()
        done = step + 1
        if done % spec.eval_every == 0 or done == spec.steps:
            row = {"step": done, "tokens": int(seen[done]), "lr": lr_at(step, spec),
                   "train_loss": float(loss.detach()), "train_ce": ce, "train_kl": kd,
                   **(evaluate(student, val, targets, spec, pad_id) if val else {}),
                   "seconds": time.perf_counter() - t0}  # fmt: skip
            curve.append(row)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}", match=f"{row.get('val_match', 0):.3f}")
            log.info("step %d %s", done, {k: round(v, 4) for k, v in row.items() if k != "step"})
        if ckpt and done % spec.ckpt_every == 0 and done < spec.steps:
            save_state(ckpt, student, opt, done, curve, tag)
    return curve


def _step_targets(train: list[Sequence], spec: DistilSpec, step: int) -> int:
    return sum(train[i].n_targets for i in batch_indices(len(train), spec, step))


def cached_teacher_targets(
    teacher: torch.nn.Module,
    seqs: list[Sequence],
    spec: DistilSpec,
    *,
    batch_size: int,
    cache_dir: Path | None,
    pad_id: int = 0,
    dtype: str = "float32",
    weights: str | None = None,
) -> tuple[dict[str, Targets], float, float]:
    """`teacher_targets` of `seqs` computed in `dtype`, read from `cache_dir` when a file was
    written there for the same sequences, settings, dtype and teacher (named by their hash:
    drafts of one teacher with the same data settings share one teacher pass, and a resumed
    run skips it; the teacher is its config without the path it was loaded from, so the cache
    holds wherever the run starts, and its weights' digest, `weights_digest`, computed here
    unless given); (targets, argmax agreement, seconds spent here)."""
    t0 = time.perf_counter()
    config = {k: v for k, v in teacher.config.to_dict().items() if k != "_name_or_path"}
    key = [[s.ids for s in seqs], spec.top_k, spec.tau, config, weights or weights_digest(teacher)]
    tag = config_hash(key if dtype == "float32" else [*key, dtype])  # float32: no dtype in the key
    cache = cache_dir / f"{tag}.pt" if cache_dir else None
    if cache and cache.exists():
        state = torch.load(cache, weights_only=False)
        if state["tag"] == tag:
            log.info("teacher targets read from %s", cache)
            return state["targets"], state["agreement"], time.perf_counter() - t0
    targets, agreement = teacher_targets(
        teacher, seqs, top_k=spec.top_k, tau=spec.tau, batch_size=batch_size, pad_id=pad_id,
        dtype=dtype,
    )  # fmt: skip
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cache) as tmp:
            torch.save({"tag": tag, "targets": targets, "agreement": agreement}, tmp)
    return targets, agreement, time.perf_counter() - t0


def weights_digest(model: torch.nn.Module) -> str:
    """A short hash of a model's parameters and buffers (names, shapes, dtypes and bytes): two
    teachers with one config but other weights (another quantization, a retrained model) never
    share a cached teacher pass or a resumable student state."""
    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        flat = tensor.detach().reshape(-1).cpu()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()[:16]


def distil_model(
    teacher: torch.nn.Module,
    records: Iterable[Mapping[str, Any]],
    decl: Mapping[str, Any],
    seed: int,
    checkpoint: str | Path | None = None,
    corpus: list[Sequence] | None = None,
    start: WarmStart | None = None,
) -> tuple[torch.nn.Module, list[dict[str, float]], dict[str, Any]]:
    """Build, distil and return a student for `decl` (a `models.<name>.distil` block) from
    the teacher's response records (and the extra `corpus` sequences, trained on only),
    started from the trained draft `start` where given (`kvspec.models.warm_start`); also
    its curve and a summary (sizes, data, vocabulary, speed)."""
    from kvspec.models.build import count_parameters

    data, spec = decl["data"], DistilSpec.from_config(decl["train"], seed)
    spec = replace(spec, dtype=resolve_dtype(spec.dtype, teacher.device.type))
    seqs = distil_sequences(records, max_len=data["max_len"], prompt_loss=data["prompt_loss"])
    train, val = split_sequences(seqs, data["val_fraction"], seed)
    corpus = without_prompts(corpus or [], val)
    train = train + corpus
    log.info("%d training (%d corpus) / %d validation sequences", len(train), len(corpus),
             len(val))  # fmt: skip
    pad_id = int(teacher.config.pad_token_id or 0)
    ckpt = Path(checkpoint) if checkpoint else None
    targets, agreement, teacher_seconds = (None, float("nan"), 0.0)
    teacher_dtype = resolve_dtype(data["teacher_dtype"], teacher.device.type)
    teacher_weights = weights_digest(teacher)
    if spec.beta > 0 or corpus:  # the corpus's labels are the teacher's argmax
        cache_dir = ckpt.parent / "teacher" if ckpt else None  # shared by the drafts
        targets, agreement, teacher_seconds = cached_teacher_targets(
            teacher, train + val, spec, batch_size=data["teacher_batch"], cache_dir=cache_dir,
            pad_id=pad_id, dtype=teacher_dtype, weights=teacher_weights,
        )  # fmt: skip
        log.info("teacher targets (%s): %.1f s, argmax = next token at %.4f", teacher_dtype,
                 teacher_seconds, agreement)  # fmt: skip
    student = build_student(decl["arch"], teacher, seed, decl["init"], decl.get("layers"))
    vocab = draft_vocabulary(teacher, train, targets, decl.get("vocab"))
    if vocab is not None:
        attach_reduced_head(student, vocab)
    taken = warm_start(student, decl.get("layers") or [], start) if start else None
    student = student.to(teacher.device)
    started = [start.digest()] if start else []
    fingerprint = config_hash([decl["arch"], decl["init"], decl.get("layers"), vocab, data,
                               [s.ids for s in train], teacher_weights, *started])  # fmt: skip
    t0 = time.perf_counter()
    curve = distil_train(student, train, val, spec, targets, ckpt, fingerprint, pad_id)
    last = curve[-1]
    final = {k: v for k, v in last.items() if k.startswith(("train_", "val_"))}
    calibration = None
    if decl.get("calibrate"):
        responses = train[: len(train) - len(corpus)]
        calibration, final = _calibrated(
            student, responses, val, targets, decl["calibrate"], spec, pad_id, final
        )
    stats = {
        "teacher_parameters": count_parameters(teacher),
        "parameters": count_parameters(student),
        "vocabulary": len(vocab) if vocab is not None else teacher.config.vocab_size,
        "sequences": {"train": len(train), "corpus": len(corpus), "val": len(val)},
        "train_targets": sum(s.n_targets for s in train),
        "steps": spec.steps,
        "tokens_seen": last["tokens"],
        "teacher_argmax_agreement": agreement,
        "final": final,
        "calibration": calibration,
        "warm_start": _started(start, taken),
        "teacher_seconds": teacher_seconds,
        "teacher_dtype": teacher_dtype,
        "train_dtype": spec.dtype,
        "train_seconds_this_run": time.perf_counter() - t0,
    }
    return student.eval(), curve, stats


def _started(start: WarmStart | None, taken: Mapping[int, int] | None) -> dict[str, Any] | None:
    """The stats' record of a warm start: the layers taken (new → trained) and the
    temperature divided out of the trained draft's readout."""
    if start is None or taken is None:
        return None
    return {"layers_taken": {str(k): v for k, v in taken.items()},
            "temperature_unfolded": start.temperature}  # fmt: skip


def _calibrated(
    student: torch.nn.Module,
    responses: list[Sequence],
    val: list[Sequence],
    targets: Mapping[str, Targets] | None,
    temperatures: list[float],
    spec: DistilSpec,
    pad_id: int,
    final: dict[str, float],
) -> tuple[dict[str, Any], dict[str, float]]:
    """Fit the draft's temperature on its training responses and fold it in
    (`kvspec.models.calibrate`); (the fit's record with the uncalibrated validation
    metrics, the final metrics re-measured on the calibrated draft)."""
    from kvspec.models.calibrate import calibrate

    if targets is None:
        raise ValueError("calibrate needs the teacher's targets (train.beta > 0 or a corpus)")
    record = calibrate(student, responses, targets, temperatures, spec.batch_size, pad_id,
                       spec.dtype)  # fmt: skip
    before = {k: v for k, v in final.items() if k.startswith("val_")}
    after = evaluate(student, val, targets, spec, pad_id) if val else {}
    return {**record, "uncalibrated": before}, {**final, **after}


def without_prompts(corpus: list[Sequence], held: list[Sequence]) -> list[Sequence]:
    """The corpus sequences whose prompt (ids up to the first learned position) is none of
    `held`'s: validation responses are scored on prompts the draft never saw."""
    prompts = {s.ids[: s.start + 1] for s in held}
    return [c for c in corpus if c.ids[: c.start + 1] not in prompts]


def draft_vocabulary(
    teacher: torch.nn.Module,
    train: list[Sequence],
    targets: Mapping[str, Targets] | None,
    size: int | None,
) -> list[int] | None:
    """The `size` tokens the teacher itself outputs most often on the training sequences
    (`teacher_order`), its stop tokens always included; None for the full vocabulary."""
    if size is None or size >= teacher.config.vocab_size:
        return None
    return vocabulary_of(teacher, teacher_order(teacher, train, targets), size)


def teacher_order(
    teacher: torch.nn.Module, train: list[Sequence], targets: Mapping[str, Targets] | None
) -> list[int]:
    """Every token, the most frequent first among the teacher's outputs on the training
    sequences: its argmax where its targets are cached, else its greedy responses' tokens."""
    if targets is not None:
        docs = [targets[s.id][0][:, 0].tolist() for s in train]
    else:
        docs = [list(s.ids[s.start + 1 :]) for s in train]
    return frequency_order(docs, teacher.config.vocab_size)
