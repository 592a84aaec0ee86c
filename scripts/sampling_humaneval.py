"""Rule sampling_humaneval: HumanEval pass@k of one decoding method (Figures 6, 8, 9)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import humaneval_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    humaneval_stage(
        job["models"],
        snakemake.input.problems,
        snakemake.output[0],
        target=job["target"],
        label=snakemake.wildcards.method,
        method=job["method"],
        settings=job["settings"],
        sandbox=job["sandbox"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        draft_linear=job["draft_linear"],
        threads=snakemake.threads,
        checkpoint=job["checkpoint"],
        pilot=snakemake.input.get("pilot"),
    )
