"""Rule pretrain_tokenize: corpus -> train/validation token streams (.npy) and counts."""

from kvspec.logs import log_to
from kvspec.models.stages import tokenize_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    out = snakemake.output
    tokenize_stage(
        snakemake.input.corpus,
        snakemake.input.tokenizer,
        **job,
        out_train=out.train,
        out_val=out.val,
        out_stats=out.stats,
    )
