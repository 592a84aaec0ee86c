# Stage sampling (document 004): speculative sampling with a draft model and three-model
# speculative sampling on the target and its distilled drafts. The sweep and the timing rule
# compare methods side by side in one process (threads: workflow.cores, alone on the machine);
# HumanEval runs one job per method with the same seeds, verdicts from the sandboxed runner.


if PLAN.sampling:

    rule sampling_sweep:
        input:
            **PLAN.sampling.sweep_models(),
            problems=PLAN.sampling.problems(),
        output:
            P.SAMPLING_SWEEP,
        log:
            P.LOG["sampling_sweep"],
        benchmark:
            P.BENCH["sampling_sweep"]
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("sampling_sweep"),
        params:
            job=PLAN.params("sampling_sweep"),
        script:
            script_path("sampling_sweep.py")

    if PLAN.sampling.piloted:

        rule sampling_pilot:
            input:
                model=PLAN.sampling.pilot_job()["model"],
                problems=PLAN.sampling.problems(),
            output:
                P.SAMPLING_PILOT,
            log:
                P.LOG["sampling_pilot"],
            benchmark:
                P.BENCH["sampling_pilot"]
            conda:
                env_path("evaluation")
            threads: 1
            resources:
                **PLAN.resources("sampling_pilot"),
            params:
                job=PLAN.params("sampling_pilot"),
            script:
                script_path("sampling_pilot.py")

    rule sampling_humaneval:
        input:
            unpack(PLAN.sampling.humaneval_models),
            unpack(PLAN.sampling.pilot_input),
            problems=PLAN.sampling.problems(),
        output:
            P.SAMPLING_HUMANEVAL,
        log:
            P.LOG["sampling_humaneval"],
        benchmark:
            P.BENCH["sampling_humaneval"]
        wildcard_constraints:
            method=one_of(PLAN.sampling.humaneval_methods),
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("sampling_humaneval"),
        params:
            job=PLAN.params("sampling_humaneval"),
        script:
            script_path("sampling_humaneval.py")

    rule sampling_timing:
        input:
            **PLAN.sampling.timing_models(),
            problems=PLAN.sampling.problems(),
        output:
            P.SAMPLING_TIMING,
        log:
            P.LOG["sampling_timing"],
        benchmark:
            P.BENCH["sampling_timing"]
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("sampling_timing"),
        params:
            job=PLAN.params("sampling_timing"),
        script:
            script_path("sampling_timing.py")

    rule sampling_math500:
        input:
            **PLAN.sampling.math500_models(),
            problems=PLAN.sampling.problems("math500"),
        output:
            P.SAMPLING_MATH500,
        log:
            P.LOG["sampling_math500"],
        benchmark:
            P.BENCH["sampling_math500"]
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("sampling_math500"),
        params:
            job=PLAN.params("sampling_math500"),
        script:
            script_path("sampling_math500.py")
