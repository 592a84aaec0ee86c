"""Rule sampling_timing: time per token of every method side by side (Figures 5, 7, 10)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import timing_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    timing_stage(
        job["models"],
        snakemake.input.problems,
        snakemake.output[0],
        target=job["target"],
        methods=job["methods"],
        settings=job["settings"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        draft_linear=job["draft_linear"],
        threads=snakemake.threads,
    )
