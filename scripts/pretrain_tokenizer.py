"""Rule pretrain_tokenizer: train the byte-level BPE tokenizer on a sample of the corpus."""

from kvspec.data.records import read_jsonl
from kvspec.io import atomic_path
from kvspec.logs import log_to
from kvspec.models.corpus import sample_documents
from kvspec.models.tokenizer import train_tokenizer

with log_to(snakemake.log[0]) as log:
    cfg = snakemake.params.tokenizer
    docs = [r["text"] for r in read_jsonl(snakemake.input[0], "text")]
    sample = sample_documents(docs, cfg["train_bytes"], snakemake.params.seed)
    tokenizer = train_tokenizer(sample, cfg["vocab_size"], cfg["model_max_length"])
    log.info("tokenizer: %d tokens, trained on %d documents", len(tokenizer), len(sample))
    with atomic_path(snakemake.output[0]) as tmp:
        tokenizer.save_pretrained(tmp)
