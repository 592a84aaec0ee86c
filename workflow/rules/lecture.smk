# Stage lecture (document 001, the inference-efficiency lecture notes): its worked examples
# measured on the study's models. Timed examples take both cores (threads: 2), so nothing else
# runs beside them; each writes results/lecture/<example>.json with provenance.


if PLAN.lecture:

    rule lecture_roofline:
        input:
            model=PLAN.lecture.model_dir(),
        output:
            "results/lecture/roofline.json",
        log:
            "logs/lecture/roofline.log",
        benchmark:
            "benchmarks/lecture/roofline.tsv"
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            settings=config["lecture"]["roofline"],
            seed=config["seed"],
        script:
            script_path("lecture_roofline.py")

    rule lecture_batching:
        input:
            model=PLAN.lecture.model_dir(),
            roofline="results/lecture/roofline.json",
        output:
            "results/lecture/batching.json",
        log:
            "logs/lecture/batching.log",
        benchmark:
            "benchmarks/lecture/batching.tsv"
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=60,
            gpu=config["resources"]["gpus"],
        params:
            settings=config["lecture"]["batching"],
            seed=config["seed"],
            device=config["resources"]["device"],
            dtype=config["resources"]["dtype"],
        script:
            script_path("lecture_batching.py")

    rule lecture_kv_cache:
        input:
            PLAN.lecture.kv_inputs(),
        output:
            "results/lecture/kv_cache.json",
        log:
            "logs/lecture/kv_cache.log",
        benchmark:
            "benchmarks/lecture/kv_cache.tsv"
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            mem_mb=8000,
            runtime=30,
            gpu=config["resources"]["gpus"],
        params:
            models=PLAN.lecture.kv_models(),
            settings=config["lecture"]["kv_cache"],
            seed=config["seed"],
            device=config["resources"]["device"],
            dtype=config["resources"]["dtype"],
        script:
            script_path("lecture_kv_cache.py")

    rule lecture_quantization:
        input:
            **PLAN.lecture.quantization_inputs(),
        output:
            "results/lecture/quantization.json",
        log:
            "logs/lecture/quantization.log",
        benchmark:
            "benchmarks/lecture/quantization.tsv"
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=60,
            gpu=config["resources"]["gpus"],
        params:
            settings=config["lecture"]["quantization"],
            calib_kind=PLAN.lecture.calibration_kind(),
            tasks=PLAN.lecture.quantization_tasks(),
            task_dir=str(PLAN.base.repo / "config/lm_eval_tasks"),
            eval_settings=PLAN.evaluate.settings(),
            seed=config["seed"],
        script:
            script_path("lecture_quantization.py")

    rule lecture_speculative:
        input:
            **PLAN.lecture.speculative_inputs(),
        output:
            "results/lecture/speculative.json",
        log:
            "logs/lecture/speculative.log",
        benchmark:
            "benchmarks/lecture/speculative.tsv"
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=60,
            gpu=config["resources"]["gpus"],
        params:
            settings=config["lecture"]["speculative"],
            bench=PLAN.lecture.bench("speculative"),
            seed=config["seed"],
            device=config["resources"]["device"],
            dtype=config["resources"]["dtype"],
        script:
            script_path("lecture_speculative.py")

    rule lecture_scheduling:
        input:
            **PLAN.lecture.scheduling_inputs(),
        output:
            "results/lecture/scheduling.json",
        log:
            "logs/lecture/scheduling.log",
        benchmark:
            "benchmarks/lecture/scheduling.tsv"
        conda:
            env_path("evaluation")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=60,
            gpu=config["resources"]["gpus"],
        params:
            settings=config["lecture"]["scheduling"],
            bench=PLAN.lecture.bench("scheduling"),
            seed=config["seed"],
            device=config["resources"]["device"],
            dtype=config["resources"]["dtype"],
        script:
            script_path("lecture_scheduling.py")
