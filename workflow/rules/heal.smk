# Stage heal (CARE, thesis 3.3.6 and Table 3.3): full MLA restoration (TransMLA layout, with
# weight-space or CARE's covariance-weighted latent), then CE + KD healing of every student
# with checkpoints at each token budget, then lm-eval on every checkpoint.
# {method} is svd (the plain SVD MLA model), transmla or transmla-care.


if HEAL:

    rule heal_restore:
        input:
            model="results/models/{model}",
            stats=heal_restore_stats,
        output:
            directory("results/heal/{model}/init/{method}"),
        log:
            "logs/heal/{model}/init/{method}.log",
        benchmark:
            "benchmarks/heal/{model}/init/{method}.tsv"
        wildcard_constraints:
            method="transmla|transmla-care",
        conda:
            env_path("training")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=60,
        params:
            rank=heal_rank(),
            freqfold=HEAL["freqfold"],
            opts=CARE["factorize"],
        script:
            script_path("heal_restore.py")

    rule heal_train:
        input:
            student=heal_student,
            teacher="results/models/{model}",
            data=heal_data(),
        output:
            models=[
                directory(f"results/heal/{{model}}/{{method}}/tokens-{b}")
                for b in HEAL["train"]["budgets"]
            ],
            curve="results/heal/{model}/{method}/curve.csv",
            stats="results/heal/{model}/{method}/stats.json",
        log:
            "logs/heal/{model}/{method}.log",
        benchmark:
            "benchmarks/heal/{model}/{method}.tsv"
        wildcard_constraints:
            method="svd|transmla|transmla-care",
        conda:
            env_path("training")
        threads: 2
        resources:
            mem_mb=64000,
            runtime=4320,
            gpu=HEAL["train"]["processes"] if config["resources"]["gpus"] else 0,
        params:
            kind=heal_kind(),
            data_opts=HEAL["data"],
            train=HEAL["train"],
            seed=config["seed"],
            state="resources/checkpoints/heal/{model}/{method}.pt",
        script:
            script_path("heal_train.py")

    rule evaluate_healed:
        input:
            model="results/heal/{model}/{method}/tokens-{budget}",
            data=care_eval_data,
        output:
            "results/evaluate/{model}/heal-{method}/tokens-{budget}.json",
        log:
            "logs/evaluate/{model}/heal-{method}/tokens-{budget}.log",
        benchmark:
            "benchmarks/evaluate/{model}/heal-{method}/tokens-{budget}.tsv"
        wildcard_constraints:
            method="svd|transmla|transmla-care",
            budget=r"\d+",
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=240,
            gpu=config["resources"]["gpus"],
        params:
            tasks=care_eval_tasks,
            task_dir=repo_path("config/lm_eval_tasks"),
            settings=care_eval_settings(),
            variant="heal-{method}/tokens-{budget}",
        script:
            script_path("evaluate_lmeval.py")

    rule report_heal_table_3_3:
        input:
            evals=heal_report_inputs(),
            paper=care_report_paper("table_3_3"),
        output:
            csv=report(
                "results/report/thesis_table_3_3.csv",
                caption="../report/thesis_table_3_3.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Table 3.3", "format": "csv"},
            ),
            md="results/report/thesis_table_3_3.md",
        log:
            "logs/report/thesis_table_3_3.log",
        conda:
            env_path("report")
        params:
            item="table_3_3",
            spec=heal_report_params(),
        script:
            script_path("report_heal.py")

    rule report_heal_convergence:
        input:
            curves=list(heal_report_params()["curves"].values()),
        output:
            png=report(
                "results/report/heal_convergence.png",
                caption="../report/heal_convergence.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Healing convergence", "format": "png"},
            ),
            pdf="results/report/heal_convergence.pdf",
            csv="results/report/heal_convergence.csv",
        log:
            "logs/report/heal_convergence.log",
        conda:
            env_path("report")
        params:
            item="convergence",
            spec=heal_report_params(),
        script:
            script_path("report_heal.py")
