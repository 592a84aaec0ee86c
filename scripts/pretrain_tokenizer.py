"""Rule pretrain_tokenizer: train the byte-level BPE tokenizer on a sample of the corpus."""

from kvspec.logs import log_to
from kvspec.models.stages import tokenizer_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    tokenizer_stage(snakemake.input[0], job["tokenizer"], job["seed"], snakemake.output[0])
