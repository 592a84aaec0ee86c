# Stage lecture (document 001, the inference-efficiency lecture notes): its worked examples
# measured on the study's models. Timed examples take every core (threads: workflow.cores), so
# nothing else runs beside them; each writes results/lecture/<example>.json with provenance.


if PLAN.lecture:

    rule lecture_roofline:
        input:
            model=PLAN.lecture.model_dir(),
        output:
            P.lecture("roofline"),
        log:
            P.lecture("roofline", "log"),
        benchmark:
            P.lecture("roofline", "benchmark")
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("lecture_roofline"),
        params:
            job=PLAN.params("lecture_roofline"),
        script:
            script_path("lecture_roofline.py")

    rule lecture_batching:
        input:
            model=PLAN.lecture.model_dir(),
            roofline=P.lecture("roofline"),
        output:
            P.lecture("batching"),
        log:
            P.lecture("batching", "log"),
        benchmark:
            P.lecture("batching", "benchmark")
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("lecture_batching"),
        params:
            job=PLAN.params("lecture_batching"),
        script:
            script_path("lecture_batching.py")

    rule lecture_kv_cache:
        input:
            PLAN.lecture.kv_inputs(),
        output:
            P.lecture("kv_cache"),
        log:
            P.lecture("kv_cache", "log"),
        benchmark:
            P.lecture("kv_cache", "benchmark")
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("lecture_kv_cache"),
        params:
            job=PLAN.params("lecture_kv_cache"),
        script:
            script_path("lecture_kv_cache.py")

    rule lecture_quantization:
        input:
            **PLAN.lecture.quantization_inputs(),
        output:
            P.lecture("quantization"),
        log:
            P.lecture("quantization", "log"),
        benchmark:
            P.lecture("quantization", "benchmark")
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("lecture_quantization"),
        params:
            job=PLAN.params("lecture_quantization"),
        script:
            script_path("lecture_quantization.py")

    rule lecture_speculative:
        input:
            **PLAN.lecture.speculative_inputs(),
        output:
            P.lecture("speculative"),
        log:
            P.lecture("speculative", "log"),
        benchmark:
            P.lecture("speculative", "benchmark")
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("lecture_speculative"),
        params:
            job=PLAN.params("lecture_speculative"),
        script:
            script_path("lecture_speculative.py")

    rule lecture_scheduling:
        input:
            **PLAN.lecture.scheduling_inputs(),
        output:
            P.lecture("scheduling"),
        log:
            P.lecture("scheduling", "log"),
        benchmark:
            P.lecture("scheduling", "benchmark")
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("lecture_scheduling"),
        params:
            job=PLAN.params("lecture_scheduling"),
        script:
            script_path("lecture_scheduling.py")

    rule lecture_paged:
        input:
            **PLAN.lecture.paged_inputs(),
        output:
            P.lecture("paged"),
        log:
            P.lecture("paged", "log"),
        benchmark:
            P.lecture("paged", "benchmark")
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("lecture_paged"),
        params:
            job=PLAN.params("lecture_paged"),
        script:
            script_path("lecture_paged.py")
