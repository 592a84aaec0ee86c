"""Rules evaluate_original / evaluate_lmeval / evaluate_healed: lm-eval metrics of one model."""

from kvspec.care.pipeline import evaluate_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    evaluate_stage(
        snakemake.input.model,
        snakemake.output[0],
        tasks=job["tasks"],
        task_dir=job["task_dir"],
        settings=job["settings"],
        meta={"model": snakemake.wildcards.model, "variant": job["variant"]},
        threads=snakemake.threads,
    )
