"""Rule lecture_roofline: this machine's roofline and the lecture's arithmetic intensities."""

from kvspec.lecture.stages import roofline_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    roofline_stage(
        snakemake.input.model,
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
