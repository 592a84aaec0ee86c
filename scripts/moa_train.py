"""Rule moa_train: one drafter head trained against the frozen target (document 002)."""

from kvspec.logs import log_to
from kvspec.neural.heads import head_train_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    head_train_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
