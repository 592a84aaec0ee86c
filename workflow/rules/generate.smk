# Stage generate (thesis 4.4.1.2): SFT prompts -> index / held-out split -> target responses.
# Scatter/gather: each shard is one job and one file, so a crash redoes only missing shards
# (and within a shard, batches already in its checkpoint are reused).


if PLAN.spec:

    rule generate_prompts:
        input:
            **PLAN.spec.prompt_sources(),
        output:
            "results/generate/prompts.jsonl",
        log:
            "logs/generate/prompts.log",
        conda:
            env_path("evaluation")
        params:
            heldout=config["spec"]["heldout"],
            limit=config["spec"]["prompts"]["limit"],
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
            model=one_of(PLAN.spec.models),
            shard=r"\d+",
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=720,
            gpu=config["resources"]["gpus"],
        params:
            fraction=lookup(dpath="spec/generate/models/{model}", within=config),
            heldout=PLAN.spec.gen_heldout,
            shards=config["spec"]["generate"]["shards"],
            max_new_tokens=config["spec"]["generate"]["max_new_tokens"],
            batch_size=config["spec"]["generate"]["batch_size"],
            device=config["resources"]["device"],
            dtype=config["resources"]["dtype"],
            checkpoint="resources/checkpoints/generate/{model}/{shard}.jsonl",
        script:
            script_path("generate_responses.py")

    rule generate_gather:
        input:
            PLAN.spec.shards,
        output:
            "results/generate/{model}/responses.jsonl",
        log:
            "logs/generate/{model}/gather.log",
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
        conda:
            env_path("evaluation")
        script:
            script_path("generate_gather.py")
