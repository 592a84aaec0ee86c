"""Rule heal_train: CE + KD healing of one student, a checkpoint per token budget."""

import torch

from kvspec.care.heal_stages import heal_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    p = snakemake.params
    heal_stage(
        snakemake.input.student,
        snakemake.input.teacher,
        snakemake.input.data,
        p.kind,
        p.data_opts,
        p.train,
        p.seed,
        {
            "models": list(snakemake.output.models),
            "curve": snakemake.output.curve,
            "stats": snakemake.output.stats,
        },
        p.state,
    )
