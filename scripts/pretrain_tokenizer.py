"""Rule pretrain_tokenizer: train the byte-level BPE tokenizer on a sample of the corpus."""

from kvspec.logs import log_to
from kvspec.models.stages import tokenizer_stage

with log_to(snakemake.log[0]):
    tokenizer_stage(
        snakemake.input[0], snakemake.params.tokenizer, snakemake.params.seed, snakemake.output[0]
    )
