"""Rule heal_ablation: one row of the Table 3.3 ablation (restore with the variant's
settings, heal to the ablation budget, validation curve and per-layer ranks)."""

from kvspec.care.heal_stages import ablation_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    ablation_stage(
        snakemake.input.model,
        snakemake.input.stats,
        snakemake.input.data,
        snakemake.output[0],
        variant=job["variant"],
        restore=job["restore"],
        factorize_opts=job["opts"],
        kind=job["kind"],
        data_opts=job["data_opts"],
        train_opts=job["train"],
        seed=job["seed"],
        state_path=job["state"],
        threads=snakemake.threads,
    )
