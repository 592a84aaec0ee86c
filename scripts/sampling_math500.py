"""Rule sampling_math500: MATH-500 accuracy, greedy with and without speculation."""

from kvspec.logs import log_to
from kvspec.sampling.stages import math500_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    math500_stage(
        job["models"],
        snakemake.input.problems,
        snakemake.output[0],
        target=job["target"],
        method=job["method"],
        settings=job["settings"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        draft_linear=job["draft_linear"],
        threads=snakemake.threads,
    )
