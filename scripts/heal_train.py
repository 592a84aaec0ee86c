"""Rule heal_train: CE + KD healing of one student, a checkpoint per token budget."""

from kvspec.care.heal_stages import heal_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    heal_stage(
        snakemake.input.student,
        snakemake.input.teacher,
        snakemake.input.data,
        kind=p.kind,
        data_opts=p.data_opts,
        train_opts=p.train,
        seed=p.seed,
        outputs={"models": list(out.models), "curve": out.curve, "stats": out.stats},
        state_path=p.state,
        threads=snakemake.threads,
    )
