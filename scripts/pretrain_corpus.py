"""Rule pretrain_corpus: training datasets (chat-rendered) + Python stdlib -> corpus JSONL."""

from kvspec.data.records import write_jsonl
from kvspec.logs import log_to
from kvspec.models.corpus import assemble

with log_to(snakemake.log[0]) as log:
    kinds = snakemake.params.kinds
    sources = {name: (snakemake.input[name], kinds[name]) for name in kinds}
    records = assemble(sources, snakemake.params.stdlib_bytes)
    n = write_jsonl(snakemake.output[0], records, "text")
    log.info("corpus: %d documents, %d characters", n, sum(len(r["text"]) for r in records))
