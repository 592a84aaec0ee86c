"""Rule lecture_quantization: the toy example and the model under RTN / mixed / AWQ weights."""

from kvspec.lecture.stages import quantization_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    quantization_stage(
        snakemake.input.model,
        snakemake.input.calibration,
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
