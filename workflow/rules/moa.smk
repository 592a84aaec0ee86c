# Stage moa (document 002, Mixture of Attentions): each drafter (MoA with TLI, EAGLE-2's
# feature head, the Independent head, Table 5's ablation heads) trained against a frozen
# target on its own responses, then every drafter with chain (<= chain_k tokens) and EAGLE-2
# tree drafting beside greedy decoding and the n-gram baselines on the prompt sets, side by
# side in one job per target (moa.target; moa.alt for Table 9); Table 8 scores the outputs.


if PLAN.moa:

    rule moa_train:
        input:
            unpack(PLAN.moa.train_inputs),
        output:
            P.MOA_HEAD,
        log:
            P.LOG["moa_train"],
        benchmark:
            P.BENCH["moa_train"]
        conda:
            env_path("evaluation")
        # one thread, so that two heads train side by side: on 2 cores four heads took 358 s
        # that way against 490 s at two threads one after the other, the two LSA heads 802
        # against 904 s, the same heads up to float rounding (2026-12-01,
        # docs/results-mini.md). GPU jobs take their cores from the resource model.
        threads: 1
        resources:
            **PLAN.resources("moa_train"),
        params:
            job=PLAN.params("moa_train"),
        script:
            script_path("moa_train.py")

    rule moa_bench:
        input:
            unpack(PLAN.moa.bench_inputs),
        output:
            runs=P.MOA_BENCH_RUNS,
            summary=P.MOA_BENCH_SUMMARY,
        log:
            P.LOG["moa_bench"],
        benchmark:
            P.BENCH["moa_bench"]
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("moa_bench"),
        params:
            job=PLAN.params("moa_bench"),
        script:
            script_path("moa_bench.py")

    if PLAN.moa.batching:

        rule moa_batching:
            input:
                unpack(PLAN.moa.batching_inputs),
            output:
                P.MOA_BATCHING,
            log:
                P.LOG["moa_batching"],
            benchmark:
                P.BENCH["moa_batching"]
            wildcard_constraints:
                model=one_of([PLAN.moa.target]),
            conda:
                env_path("evaluation")
            threads: workflow.cores  # timed: holds the machine
            resources:
                **PLAN.resources("moa_batching"),
            params:
                job=PLAN.params("moa_batching"),
            script:
                script_path("moa_batching.py")

    rule moa_quality:
        input:
            unpack(PLAN.moa.quality_inputs),
        output:
            runs=P.MOA_QUALITY_RUNS,
            summary=P.MOA_QUALITY_SUMMARY,
        log:
            P.LOG["moa_quality"],
        benchmark:
            P.BENCH["moa_quality"]
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("moa_quality"),
        params:
            job=PLAN.params("moa_quality"),
        script:
            script_path("moa_quality.py")
