"""Rule covariance_collect: K/V input covariance and mean |x| of a model on one calibration set."""

import torch

from kvspec.care.pipeline import covariance_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    p = snakemake.params
    covariance_stage(
        snakemake.input.model,
        snakemake.input.data,
        p.calib["kind"],
        p.calib,
        p.seed,
        snakemake.output[0],
        p.dtype,
        p.device,
    )
