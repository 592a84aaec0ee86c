"""Rule specdecode_acceptance: per-position acceptance of one index on one held-out set."""

from kvspec.data.records import read_jsonl
from kvspec.eval.acceptance import acceptance_rows
from kvspec.io import provenance, read_json
from kvspec.logs import log_to
from kvspec.report.spec import write_rows
from kvspec.spec.corpora import heldout_items
from kvspec.spec.generate import load_model, stop_ids
from kvspec.spec.ngram_index import open_engine

with log_to(snakemake.log[0]) as log:
    p, w = snakemake.params, snakemake.wildcards
    model, tokenizer = load_model(snakemake.input.model, p.device, p.dtype, snakemake.threads)
    stats = read_json(snakemake.input.index_stats)
    engine = open_engine(
        snakemake.input.index, stats["vocab_size"], stats["eos_token_id"], p.max_support
    )
    records = read_jsonl(snakemake.input.outputs)
    stops = stop_ids(model, tokenizer)
    items = heldout_items(records, w.heldout, w.responses, tokenizer, stops, p.max_tokens)
    rows = acceptance_rows(model, engine, items, p.temperature)
    log.info(
        "%d positions over %d prompts, mean acceptance %.4f",
        len(rows),
        len(items),
        rows["acceptance"].mean(),
    )
    write_rows(
        snakemake.output[0], rows, provenance(dict(w), index=stats["provenance"]["config_hash"])
    )
