"""Rule sampling_pilot: which HumanEval problems the target solves at all (document 004)."""

from kvspec.logs import log_to
from kvspec.sampling.pilot import pilot_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    pilot_stage(
        snakemake.input.model,
        snakemake.input.problems,
        snakemake.output[0],
        settings=job["settings"],
        prompt_format=job["prompt_format"],
        sandbox=job["sandbox"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        threads=snakemake.threads,
        checkpoint=job["checkpoint"],
    )
