"""Rule heal_train: CE + KD healing of one student, a checkpoint per token budget."""

from kvspec.care.heal_stages import heal_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    job, out = job, snakemake.output
    heal_stage(
        snakemake.input.student,
        snakemake.input.teacher,
        snakemake.input.data,
        kind=job["kind"],
        data_opts=job["data_opts"],
        train_opts=job["train"],
        seed=job["seed"],
        outputs={"models": list(out.models), "curve": out.curve, "stats": out.stats},
        state_path=job["state"],
        threads=snakemake.threads,
    )
