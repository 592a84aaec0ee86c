"""Rule specdecode_mla: a healed MLA target and its GQA original with infini-gram drafting at
long contexts (beyond the documents: the thesis's two chapters together)."""

from kvspec.logs import log_to
from kvspec.ngram.mla_speed import mla_speed_stage

with log_to(snakemake.log[0]):
    mla_speed_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **snakemake.params.job,
        threads=snakemake.threads,
    )
