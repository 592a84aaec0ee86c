"""Rule covariance_collect: K/V input covariance and mean |x| of a model on one calibration set."""

from kvspec.care.pipeline import covariance_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    covariance_stage(
        snakemake.input.model,
        snakemake.input.data,
        snakemake.output[0],
        kind=job["calib"]["kind"],
        calib=job["calib"],
        seed=job["seed"],
        dtype=job["dtype"],
        device=job["device"],
        threads=snakemake.threads,
    )
