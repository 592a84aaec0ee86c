"""Rule lecture_speculative: the worked example, exactness, expected vs measured length."""

from kvspec.lecture.stages import speculative_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    speculative_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
