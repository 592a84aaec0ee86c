"""Rule sampling_sweep: the draft-length x temperature sweep (document 004, Figures 1-4)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import sweep_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    sweep_stage(
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
