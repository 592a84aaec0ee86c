"""Rules evaluate_original / evaluate_lmeval: lm-eval metrics of one (converted) model."""

import torch

from kvspec.care.pipeline import evaluate_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    meta = {"model": snakemake.wildcards.model, "variant": snakemake.params.variant}
    evaluate_stage(
        snakemake.input.model,
        snakemake.params.tasks,
        snakemake.params.task_dir,
        snakemake.params.settings,
        snakemake.output[0],
        meta,
    )
