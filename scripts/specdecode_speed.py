"""Rule specdecode_speed: every decoding method on one benchmark set, side by side."""

from kvspec.logs import log_to
from kvspec.ngram.stages import speed_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    speed_stage(
        dict(snakemake.input.items()),
        snakemake.output.runs,
        snakemake.output.summary,
        model=snakemake.wildcards.model,
        **job,
        threads=snakemake.threads,
    )
