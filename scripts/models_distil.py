"""Rule models_distil: distil a draft model from its teacher's greedy responses; save it (with
the teacher's tokenizer), its curve and stats."""

from kvspec.logs import log_to
from kvspec.models.stages import distil_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    named = dict(snakemake.input.items())
    corpus = {k.removeprefix("corpus_"): v for k, v in named.items()
              if k.startswith("corpus_")}  # fmt: skip
    distil_stage(
        teacher=snakemake.input.teacher,
        responses=snakemake.input.responses,
        **job,
        corpus=corpus,
        **{k: named[k] for k in ("start", "start_stats") if k in named},  # distil.start
        threads=snakemake.threads,
        out_model=snakemake.output.model,
        out_curve=snakemake.output.curve,
        out_stats=snakemake.output.stats,
    )
