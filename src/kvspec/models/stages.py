"""The pretraining stages as functions of files (mini stand-ins and ci models): corpus →
tokenizer → token streams → trained model. Each writes its outputs atomically."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kvspec.seeds import derive

if TYPE_CHECKING:
    from kvspec.models.warm_start import WarmStart

log = logging.getLogger(__name__)


def corpus_stage(
    sources: dict[str, str], kinds: dict[str, str], stdlib_bytes: int, out: str
) -> None:
    """The corpus (chat-rendered training datasets + Python stdlib source) as JSONL."""
    from kvspec.data.records import write_jsonl
    from kvspec.models.corpus import assemble

    records = assemble({n: (sources[n], kinds[n]) for n in kinds}, stdlib_bytes)
    n = write_jsonl(out, records, "text")
    log.info("corpus: %d documents, %d characters", n, sum(len(r["text"]) for r in records))


def tokenizer_stage(corpus: str, settings: dict[str, Any], seed: int, out: str) -> None:
    """A byte-level BPE trained on a seeded sample of the corpus (`settings`: config tokenizer)."""
    from kvspec.data.records import read_jsonl
    from kvspec.io import atomic_path
    from kvspec.models.corpus import sample_documents
    from kvspec.models.tokenizer import train_tokenizer

    docs = [r["text"] for r in read_jsonl(corpus, "text")]
    sample = sample_documents(docs, settings["train_bytes"], derive(seed, "tokenizer documents"))
    tokenizer = train_tokenizer(sample, settings["vocab_size"], settings["model_max_length"])
    log.info("tokenizer: %d tokens, trained on %d documents", len(tokenizer), len(sample))
    with atomic_path(out) as tmp:
        tokenizer.save_pretrained(tmp)


def tokenize_stage(
    corpus: str,
    tokenizer: str,
    *,
    val_fraction: float,
    seed: int,
    out_train: str,
    out_val: str,
    out_stats: str,
) -> None:
    """The corpus as train/validation token streams (.npy) and their counts."""
    from kvspec.io import write_json
    from kvspec.models.tokens import save_array, token_streams

    train, val, stats = token_streams(corpus, tokenizer, val_fraction, seed)
    save_array(out_train, train)
    save_array(out_val, val)
    write_json(out_stats, stats)
    log.info("tokens: %s", stats)


def train_stage(
    decl: dict[str, Any],
    tokenizer: str,
    train: str,
    val: str,
    *,
    seed: int,
    threads: int,
    out_model: str,
    out_curve: str,
    out_stats: str,
    checkpoint: str | None = None,
) -> None:
    """Build and train one model (`decl`: its config pretrain block); save model, curve, stats."""
    import numpy as np
    import pandas as pd

    from kvspec.io import write_json, write_text
    from kvspec.models.load import use_threads
    from kvspec.models.pretrain import pretrain_model
    from kvspec.provenance import provenance

    use_threads(threads)
    curve, stats = pretrain_model(
        decl["arch"],
        decl["train"],
        seed,
        tokenizer,
        np.load(train),
        np.load(val),
        out_model,
        checkpoint=checkpoint,
    )
    write_text(out_curve, pd.DataFrame(curve).to_csv(index=False))
    write_json(out_stats, {**stats, "provenance": provenance(decl)})


def distil_stage(
    *,
    teacher: str,
    responses: str,
    decl: dict[str, Any],
    seed: int,
    threads: int,
    out_model: str,
    out_curve: str,
    out_stats: str,
    checkpoint: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    corpus: dict[str, str] | None = None,
    start: str | None = None,
    start_stats: str | None = None,
    start_layers: list[int] | None = None,
) -> None:
    """Distil a draft from the `teacher` directory on its responses and on the `corpus`
    datasets (name -> normalized JSONL; `decl`: the model's config distil block, its
    `data.corpus_limit` records drawn), started from the trained draft in directory `start`
    where given (cut from the teacher's `start_layers`; its stats file `start_stats` gives the
    temperature folded into it); save it with the teacher's tokenizer, its curve and stats."""
    from pathlib import Path

    import pandas as pd

    from kvspec.data.records import read_jsonl
    from kvspec.io import atomic_path, write_json, write_text
    from kvspec.models.distil import distil_model
    from kvspec.models.load import load_model, use_threads
    from kvspec.provenance import provenance

    use_threads(threads)
    model, tokenizer = load_model(teacher, dtype=dtype, device=device)
    records = read_jsonl(responses)
    extra = _corpus(corpus or {}, records, tokenizer, model, decl["data"], seed)
    warm = _warm_start(start, start_stats, start_layers, dtype, device) if start else None
    student, curve, stats = distil_model(model, records, decl, seed, checkpoint, extra, warm)
    with atomic_path(out_model) as tmp:
        student.cpu().save_pretrained(tmp)  # from the CPU, whatever device trained it
        tokenizer.save_pretrained(tmp)
    write_text(out_curve, pd.DataFrame(curve).to_csv(index=False))
    write_json(out_stats, {**stats, "provenance": provenance(decl, teacher=teacher)})
    if checkpoint:  # the teacher's targets stay beside it for the other drafts
        Path(checkpoint).unlink(missing_ok=True)


def _warm_start(
    start: str, stats: str | None, layers: list[int] | None, dtype: str, device: str
) -> WarmStart:
    """The trained draft a distillation starts from (`kvspec.models.warm_start`)."""
    from kvspec.io import read_json
    from kvspec.models.load import load_model
    from kvspec.models.warm_start import WarmStart

    if not stats or not layers:
        raise ValueError("a warm start needs the trained draft's stats file and its layers")
    calibration = read_json(stats).get("calibration") or {}
    model, _ = load_model(start, dtype=dtype, device=device)
    return WarmStart(model, list(layers), float(calibration.get("temperature", 1.0)))


def _corpus(
    files: dict[str, str],
    records: list[dict[str, Any]],
    tokenizer: Any,
    model: Any,
    data: dict[str, Any],
    seed: int,
) -> list[Any]:
    """The distillation corpus's sequences (none without files or at corpus_limit 0)."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.loop import stop_set
    from kvspec.models.distil_corpus import corpus_sequences, heldout_prompts

    if not files or not data.get("corpus_limit"):
        return []
    stops = sorted(stop_set(model.generation_config.eos_token_id))
    datasets = {name: read_jsonl(path) for name, path in files.items()}
    return corpus_sequences(
        datasets, tokenizer, stops, exclude=heldout_prompts(records), max_len=data["max_len"],
        limit=data["corpus_limit"], seed=seed,
    )  # fmt: skip
