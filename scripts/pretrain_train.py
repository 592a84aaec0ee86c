"""Rule pretrain_train: build and train one model; save it, its loss curve and stats."""

from kvspec.logs import log_to
from kvspec.models.stages import train_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    inp, out = snakemake.input, snakemake.output
    train_stage(
        job["decl"],
        inp.tokenizer,
        inp.train,
        inp.val,
        seed=job["seed"],
        threads=snakemake.threads,
        out_model=out.model,
        out_curve=out.curve,
        out_stats=out.stats,
        checkpoint=job["checkpoint"],
    )
