"""Rule ngram_index: an infini-gram index over SFT or target responses; build time, bytes/token."""

from transformers import AutoConfig, AutoTokenizer

from kvspec.data.records import read_jsonl
from kvspec.io import provenance, write_json
from kvspec.logs import log_to
from kvspec.spec.corpora import index_documents
from kvspec.spec.generate import config_stops
from kvspec.spec.ngram_index import build_index

with log_to(snakemake.log[0]) as log:
    tokenizer = AutoTokenizer.from_pretrained(snakemake.input.model)
    model_config = AutoConfig.from_pretrained(snakemake.input.model)
    stops = config_stops(snakemake.input.model, tokenizer)
    records = read_jsonl(snakemake.input.corpus)
    corpus, fraction = snakemake.wildcards.corpus, snakemake.params.fraction
    docs = index_documents(records, corpus, fraction, tokenizer, stops)
    vocab = max(model_config.vocab_size, len(tokenizer))
    stats = build_index(
        docs, snakemake.output.index, vocab, tokenizer.eos_token_id, cpus=snakemake.threads
    )
    log.info("index %s_%s: %s", corpus, fraction, stats)
    meta = {
        "corpus": corpus,
        "fraction": fraction,
        "vocab_size": vocab,
        "eos_token_id": tokenizer.eos_token_id,
    }
    write_json(snakemake.output.stats, {**stats, **meta, "provenance": provenance(meta)})
