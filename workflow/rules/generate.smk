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
        resources:
            **PLAN.resources("generate_prompts"),
        params:
            job=PLAN.params("generate_prompts"),
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
        threads: WORK_THREADS
        resources:
            **PLAN.resources("generate_responses"),
        params:
            job=PLAN.params("generate_responses"),
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
        resources:
            **PLAN.resources("generate_gather"),
        script:
            script_path("generate_gather.py")
