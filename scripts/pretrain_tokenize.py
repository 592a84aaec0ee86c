"""Rule pretrain_tokenize: corpus -> train/validation token streams (.npy) and counts."""

from kvspec.io import write_json
from kvspec.logs import log_to
from kvspec.models.tokens import save_array, token_streams

with log_to(snakemake.log[0]) as log:
    train, val, stats = token_streams(
        snakemake.input.corpus,
        snakemake.input.tokenizer,
        snakemake.params.val_fraction,
        snakemake.params.seed,
    )
    save_array(snakemake.output.train, train)
    save_array(snakemake.output.val, val)
    write_json(snakemake.output.stats, stats)
    log.info("tokens: %s", stats)
