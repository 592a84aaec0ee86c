"""Rules evaluate_original / evaluate_lmeval / evaluate_healed: lm-eval metrics of one model (for
evaluate_lmeval, the MLA model the job converts from the factors and rank plan it reads)."""

from kvspec.care.pipeline import evaluate_job
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    evaluate_job(
        dict(snakemake.input.items()),
        snakemake.output[0],
        snakemake.wildcards.model,
        snakemake.threads,
        **snakemake.params.job,
    )
