"""Rules evaluate_original / evaluate_lmeval / evaluate_healed: lm-eval metrics of one model."""

from kvspec.care.pipeline import evaluate_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    evaluate_stage(
        snakemake.input.model,
        snakemake.output[0],
        tasks=p.tasks,
        task_dir=p.task_dir,
        settings=p.settings,
        meta={"model": snakemake.wildcards.model, "variant": p.variant},
        threads=snakemake.threads,
    )
