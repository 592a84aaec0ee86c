"""Rule pretrain_corpus: training datasets (chat-rendered) + Python stdlib -> corpus JSONL."""

from kvspec.logs import log_to
from kvspec.models.stages import corpus_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    corpus_stage(
        dict(snakemake.input.items()),
        job["kinds"],
        job["stdlib_bytes"],
        snakemake.output[0],
    )
