"""Rule remote_run: one head on a client, its target on a server process (Tables 3, 4, 7)."""

from kvspec.logs import log_to
from kvspec.remote.stage import remote_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    remote_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        drafter=snakemake.wildcards.drafter,
        sandbox=job["sandbox"],
        dtype=job["dtype"],
        linear=job["linear"],
        device=job["device"],
        seed=job["seed"],
        threads=snakemake.threads,
        **job["settings"],
    )
