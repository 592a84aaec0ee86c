# Stage generate (thesis 4.4.1.2): SFT prompts -> index / held-out split -> target responses.
# Scatter/gather: each shard is one job and one file, so a crash redoes only missing shards
# (and within a shard, batches already in its checkpoint are reused).


rule generate_prompts:
    input:
        unpack(spec_prompt_sources),
    output:
        "results/generate/prompts.jsonl",
    log:
        "logs/generate/prompts.log",
    conda:
        env_path("evaluation")
    params:
        heldout=spec_cfg("heldout"),
        limit=spec_cfg("prompts", "limit"),
        seed=config["seed"],
    script:
        script_path("generate_prompts.py")


rule generate_responses:
    input:
        prompts="results/generate/prompts.jsonl",
        model="results/models/{model}",
    output:
        "results/generate/{model}/shards/{shard}.jsonl",
    log:
        "logs/generate/{model}/{shard}.log",
    benchmark:
        "benchmarks/generate/{model}/{shard}.tsv"
    wildcard_constraints:
        model=one_of(SPEC_GEN_MODELS),
        shard=r"\d+",
    conda:
        env_path("evaluation")
    threads: 2
    resources:
        mem_mb=8000,
        runtime=720,
        gpu=config["resources"]["gpus"],
    params:
        fraction=spec_gen_fraction,
        heldout=spec_gen_heldout,
        shards=spec_cfg("generate", "shards"),
        max_new_tokens=spec_cfg("generate", "max_new_tokens"),
        batch_size=spec_cfg("generate", "batch_size"),
        device=config["resources"]["device"],
        dtype=config["resources"]["dtype"],
        checkpoint="resources/checkpoints/generate/{model}/{shard}.jsonl",
    script:
        script_path("generate_responses.py")


rule generate_gather:
    input:
        spec_gen_shards,
    output:
        "results/generate/{model}/responses.jsonl",
    log:
        "logs/generate/{model}/gather.log",
    wildcard_constraints:
        model=one_of(SPEC_GEN_MODELS),
    conda:
        env_path("evaluation")
    script:
        script_path("generate_gather.py")
