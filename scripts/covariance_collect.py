"""Rule covariance_collect: K/V input covariance and mean |x| of a model on one calibration set."""

from kvspec.care.pipeline import covariance_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    covariance_stage(
        snakemake.input.model,
        snakemake.input.data,
        snakemake.output[0],
        kind=p.calib["kind"],
        calib=p.calib,
        seed=p.seed,
        dtype=p.dtype,
        device=p.device,
        threads=snakemake.threads,
    )
