# Stage evaluate (CARE, thesis 3.4): lm-eval on the original GQA model, on every converted MLA
# model and on every healed checkpoint. Each evaluation runs only the columns that some table
# or figure reads from it (PLAN.evaluate).


if PLAN.care:

    rule evaluate_original:
        input:
            model="results/models/{model}",
            data=PLAN.evaluate.original_data,
        output:
            "results/evaluate/{model}/original.json",
        log:
            "logs/evaluate/{model}/original.log",
        benchmark:
            "benchmarks/evaluate/{model}/original.tsv"
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=240,
            gpu=config["resources"]["gpus"],
        params:
            tasks=PLAN.evaluate.original_tasks,
            task_dir=str(PLAN.base.repo / "config/lm_eval_tasks"),
            settings=PLAN.evaluate.settings(),
            variant="original",
        script:
            script_path("evaluate_lmeval.py")

    rule evaluate_lmeval:
        input:
            model="results/convert/{model}/models/{fact}-{calib}/{plan}",
            base="results/models/{model}",  # the converted model reads its unchanged weights here
            data=PLAN.evaluate.converted_data,
        output:
            "results/evaluate/{model}/{fact}-{calib}/{plan}.json",
        log:
            "logs/evaluate/{model}/{fact}-{calib}/{plan}.log",
        benchmark:
            "benchmarks/evaluate/{model}/{fact}-{calib}/{plan}.tsv"
        wildcard_constraints:
            fact="svd|asvd|care",
            plan=r"(uniform|waterfill)-r\d+|halve-l\d+|svgroup-g\d+",
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=240,
            gpu=config["resources"]["gpus"],
        params:
            tasks=PLAN.evaluate.converted_tasks,
            task_dir=str(PLAN.base.repo / "config/lm_eval_tasks"),
            settings=PLAN.evaluate.settings(),
            variant="{fact}-{calib}/{plan}",
        script:
            script_path("evaluate_lmeval.py")


if PLAN.heal:

    rule evaluate_healed:
        input:
            model="results/heal/{model}/{method}/tokens-{budget}",
            data=PLAN.evaluate.healed_data,
        output:
            "results/evaluate/{model}/heal-{method}/tokens-{budget}.json",
        log:
            "logs/evaluate/{model}/heal-{method}/tokens-{budget}.log",
        benchmark:
            "benchmarks/evaluate/{model}/heal-{method}/tokens-{budget}.tsv"
        wildcard_constraints:
            method=one_of(PLAN.heal.methods if PLAN.heal else []),
            budget=r"\d+",
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=240,
            gpu=config["resources"]["gpus"],
        params:
            tasks=PLAN.evaluate.healed_tasks,
            task_dir=str(PLAN.base.repo / "config/lm_eval_tasks"),
            settings=PLAN.evaluate.settings(),
            variant="heal-{method}/tokens-{budget}",
        script:
            script_path("evaluate_lmeval.py")
