# Stage generate (thesis 4.4.1.2): SFT prompts -> index / held-out split -> target responses.
# Scatter/gather: each shard is one job and one file, so a crash redoes only missing shards
# (and within a shard, batches already in its checkpoint are reused).


if PLAN.spec:

    rule generate_prompts:
        input:
            **PLAN.spec.prompt_sources(),
        output:
            P.PROMPTS,
        log:
            P.LOG["generate_prompts"],
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
            prompts=P.PROMPTS,
            model=P.MODEL,
        output:
            P.SHARD,
        log:
            P.LOG["generate_responses"],
        benchmark:
            P.BENCH["generate_responses"]
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
            shard=WILDCARDS["shard"],
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
            checkpoint=P.SHARD_STATE,
        script:
            script_path("generate_responses.py")

    rule generate_gather:
        input:
            PLAN.spec.shards,
        output:
            P.RESPONSES,
        log:
            P.LOG["generate_gather"],
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
        conda:
            env_path("evaluation")
        script:
            script_path("generate_gather.py")
