"""Rule sampling_math500: MATH-500 accuracy, greedy with and without speculation."""

from kvspec.logs import log_to
from kvspec.sampling.stages import math500_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    math500_stage(
        p.models,
        snakemake.input.problems,
        snakemake.output[0],
        target=p.target,
        method=p.method,
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
