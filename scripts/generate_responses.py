"""Rule generate_responses: one shard of the target model's greedy responses."""

from kvspec.data.records import read_jsonl
from kvspec.logs import log_to
from kvspec.spec.generate import generate_shard, generation_prompts, load_model, shard_slice

with log_to(snakemake.log[0]):
    p = snakemake.params
    prompts = generation_prompts(read_jsonl(snakemake.input.prompts), p.fraction, p.heldout)
    mine = [prompts[i] for i in shard_slice(len(prompts), p.shards, int(snakemake.wildcards.shard))]
    model, tokenizer = load_model(snakemake.input.model, p.device, p.dtype, snakemake.threads)
    generate_shard(
        model, tokenizer, mine, snakemake.output[0],
        p.max_new_tokens, p.batch_size, checkpoint=p.checkpoint,
    )  # fmt: skip
