# Stage convert (CARE, thesis 3.3.3-3.3.5): full-rank factors and spectra per method, rank plans
# (uniform / water-filling, and the Figure 3.1 sensitivity plans), MLA model directories.
# {fact} is svd, asvd or care; {calib} is a calibration tag, or "none" for plain SVD; {plan} a
# rank plan (kvspec.plan.names).


if PLAN.care:

    rule convert_factorize:
        input:
            unpack(PLAN.care.factor_inputs),
        output:
            "results/convert/{model}/factors/{fact}-{calib}.safetensors",
        log:
            "logs/convert/{model}/factors/{fact}-{calib}.log",
        benchmark:
            "benchmarks/convert/{model}/factors/{fact}-{calib}.tsv"
        wildcard_constraints:
            fact="svd|asvd|care",
            calib=r"none|[a-z0-9_]+-n\d+-t\d+",
        conda:
            env_path("training")
        threads: 1
        resources:
            mem_mb=16000,
            runtime=60,
        params:
            opts=config["care"]["factorize"],
            seed=config["seed"],
            dtype=config["resources"]["dtype"],
        script:
            script_path("convert_factorize.py")

    rule convert_allocate:
        input:
            "results/convert/{model}/factors/{fact}-{calib}.safetensors",
        output:
            "results/convert/{model}/ranks/{fact}-{calib}/{alloc}-r{rank}.json",
        log:
            "logs/convert/{model}/ranks/{fact}-{calib}/{alloc}-r{rank}.log",
        wildcard_constraints:
            fact="svd|asvd|care",
            alloc="uniform|waterfill",
            rank=r"\d+",
        conda:
            env_path("training")
        threads: 1
        script:
            script_path("convert_allocate.py")

    rule convert_sensitivity:
        input:
            "results/convert/{model}/factors/{fact}-{calib}.safetensors",
        output:
            "results/convert/{model}/ranks/{fact}-{calib}/{plan}.json",
        log:
            "logs/convert/{model}/ranks/{fact}-{calib}/{plan}.log",
        wildcard_constraints:
            fact="svd|asvd|care",
            plan=r"halve-l\d+|svgroup-g\d+",
        conda:
            env_path("training")
        threads: 1
        params:
            opts=PLAN.care.sensitivity_opts,
        script:
            script_path("convert_sensitivity.py")

    rule convert_mla:
        input:
            model="results/models/{model}",
            factors="results/convert/{model}/factors/{fact}-{calib}.safetensors",
            plan="results/convert/{model}/ranks/{fact}-{calib}/{plan}.json",
        output:
            directory("results/convert/{model}/models/{fact}-{calib}/{plan}"),
        log:
            "logs/convert/{model}/models/{fact}-{calib}/{plan}.log",
        benchmark:
            "benchmarks/convert/{model}/models/{fact}-{calib}/{plan}.tsv"
        wildcard_constraints:
            fact="svd|asvd|care",
            plan=r"(uniform|waterfill)-r\d+|halve-l\d+|svgroup-g\d+",
        conda:
            env_path("training")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=60,
        script:
            script_path("convert_mla.py")

    if config["care"]["decode_speed"]:

        rule convert_decode_speed:
            input:
                lambda wildcards: list(PLAN.care.decode_speed_models().values()),
            output:
                "results/convert/{model}/decode_speed.json",
            log:
                "logs/convert/{model}/decode_speed.log",
            benchmark:
                "benchmarks/convert/{model}/decode_speed.tsv"
            wildcard_constraints:
                model=one_of([PLAN.care.main]),
            conda:
                env_path("evaluation")
            threads: 2
            resources:
                mem_mb=16000,
                runtime=60,
                gpu=config["resources"]["gpus"],
            params:
                models=PLAN.care.decode_speed_models(),
                settings=config["care"]["decode_speed"],
                device=config["resources"]["device"],
                dtype=config["resources"]["dtype"],
                seed=config["seed"],
            script:
                script_path("convert_decode_speed.py")
