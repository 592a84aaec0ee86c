# Stage covariance (CARE, thesis 3.3.1-3.3.2): K/V input statistics of a model on N calibration
# windows of T tokens from one calibration set. {calib} is "<set>-n<N>-t<T>" (plan.names.Calib).


if PLAN.care:

    rule covariance_collect:
        input:
            model="results/models/{model}",
            data=PLAN.care.calib_data,
        output:
            "results/covariance/{model}/{calib}.safetensors",
        log:
            "logs/covariance/{model}/{calib}.log",
        benchmark:
            "benchmarks/covariance/{model}/{calib}.tsv"
        wildcard_constraints:
            calib=r"[a-z0-9_]+-n\d+-t\d+",
        conda:
            env_path("training")
        threads: 2
        resources:
            mem_mb=8000,
            runtime=60,
            gpu=config["resources"]["gpus"],
        params:
            calib=PLAN.care.calib_settings,
            seed=config["seed"],
            dtype=config["resources"]["dtype"],
            device=config["resources"]["device"],
        script:
            script_path("covariance_collect.py")
