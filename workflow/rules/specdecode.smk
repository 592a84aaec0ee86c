# Stage specdecode (thesis 4.3.3, 4.5): acceptance analysis of the indexes (no decoding) and
# speed benchmarks of every decoding method on the same prompts at batch size 1.
# {responder} is whose held-out responses are replayed: sft (the dataset's) or target (ours).
# Draft models (spec.drafts) get their accepted length and cost relative to their target.


if PLAN.spec:

    rule specdecode_acceptance:
        input:
            unpack(PLAN.spec.acceptance_inputs),
        output:
            P.ACCEPTANCE,
        log:
            P.LOG["specdecode_acceptance"],
        benchmark:
            P.BENCH["specdecode_acceptance"]
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
            corpus=WILDCARDS["corpus"],
            fraction=one_of(PLAN.spec.fractions),
            responder=WILDCARDS["responder"],
            heldout=one_of(PLAN.spec.heldout),
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("specdecode_acceptance"),
        params:
            job=PLAN.params("specdecode_acceptance"),
        script:
            script_path("specdecode_acceptance.py")

    rule specdecode_speed:
        input:
            unpack(PLAN.spec.speed_inputs),
        output:
            runs=P.SPEED_RUNS,
            summary=P.SPEED_SUMMARY,
        log:
            P.LOG["specdecode_speed"],
        benchmark:
            P.BENCH["specdecode_speed"]
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
            bench=one_of(PLAN.spec.bench_sets),
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("specdecode_speed"),
        params:
            job=PLAN.params("specdecode_speed"),
        script:
            script_path("specdecode_speed.py")

    if PLAN.spec.mla:

        rule specdecode_mla:
            input:
                unpack(PLAN.spec.mla_inputs),
            output:
                P.MLA_SPEED,
            log:
                P.LOG["specdecode_mla"],
            benchmark:
                P.BENCH["specdecode_mla"]
            wildcard_constraints:
                model=one_of([PLAN.spec.target]),
            conda:
                env_path("evaluation")
            threads: workflow.cores  # timed: holds the machine
            resources:
                **PLAN.resources("specdecode_mla"),
            params:
                job=PLAN.params("specdecode_mla"),
            script:
                script_path("specdecode_mla.py")

    rule specdecode_arctic_build:
        output:
            directory(P.ARCTIC_SUFFIX),
        log:
            P.LOG["specdecode_arctic_build"],
        benchmark:
            P.BENCH["specdecode_arctic_build"]
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("specdecode_arctic_build"),
        script:
            script_path("specdecode_arctic_build.py")

    rule specdecode_llamacpp_build:
        output:
            directory(P.LLAMA_CPP),
        log:
            P.LOG["specdecode_llamacpp_build"],
        benchmark:
            P.BENCH["specdecode_llamacpp_build"]
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("specdecode_llamacpp_build"),
        script:
            script_path("specdecode_llamacpp_build.py")

    rule specdecode_draft_latency:
        input:
            unpack(PLAN.spec.latency_inputs),
        output:
            P.DRAFT_LATENCY,
        log:
            P.LOG["specdecode_draft_latency"],
        benchmark:
            P.BENCH["specdecode_draft_latency"]
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("specdecode_draft_latency"),
        params:
            job=PLAN.params("specdecode_draft_latency"),
        script:
            script_path("specdecode_draft_latency.py")

    rule specdecode_draft_quality:
        input:
            unpack(PLAN.spec.draft_quality_inputs),
        output:
            P.DRAFT_QUALITY,
        log:
            P.LOG["specdecode_draft_quality"],
        benchmark:
            P.BENCH["specdecode_draft_quality"]
        wildcard_constraints:
            model=one_of(PLAN.spec.drafts),
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("specdecode_draft_quality"),
        params:
            job=PLAN.params("specdecode_draft_quality"),
        script:
            script_path("specdecode_draft_quality.py")
