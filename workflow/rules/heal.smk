# Stage heal (CARE, thesis 3.3.6 and Table 3.3): full MLA restoration (TransMLA layout, with
# weight-space or CARE's covariance-weighted latent), then CE + KD healing of every student
# with a checkpoint at each token budget (evaluated in evaluate.smk).
# {method} is svd (the plain SVD MLA model), transmla, transmla-pca or transmla-care.


if PLAN.heal:

    rule heal_restore:
        input:
            model="results/models/{model}",
            stats=PLAN.heal.restore_stats,
        output:
            directory("results/heal/{model}/init/{method}"),
        log:
            "logs/heal/{model}/init/{method}.log",
        benchmark:
            "benchmarks/heal/{model}/init/{method}.tsv"
        wildcard_constraints:
            method=one_of(PLAN.heal.restored()),
        conda:
            env_path("training")
        threads: 1
        resources:
            mem_mb=40000,
            runtime=60,
        params:
            rank=PLAN.heal.rank(),
            freqfold=config["care"]["heal"]["freqfold"],
            cache=config["care"]["heal"]["cache"],
            rope_width=config["care"]["heal"]["rope_dim"],
            schedule=PLAN.heal.schedule,
            opts=config["care"]["factorize"],
        script:
            script_path("heal_restore.py")

    rule heal_train:
        input:
            student=PLAN.heal.student,
            teacher="results/models/{model}",
            data=PLAN.heal.data(),
        output:
            models=[directory(path) for path in PLAN.heal.checkpoints()],
            curve="results/heal/{model}/{method}/curve.csv",
            stats="results/heal/{model}/{method}/stats.json",
        log:
            "logs/heal/{model}/{method}.log",
        benchmark:
            "benchmarks/heal/{model}/{method}.tsv"
        wildcard_constraints:
            method=one_of(PLAN.heal.methods),
        conda:
            env_path("training")
        threads: 2
        resources:
            mem_mb=64000,
            runtime=4320,
            gpu=PLAN.heal.gpus(),
        params:
            kind=PLAN.heal.kind(),
            data_opts=config["care"]["heal"]["data"],
            train=config["care"]["heal"]["train"],
            seed=config["seed"],
            state="resources/checkpoints/heal/{model}/{method}.pt",
        script:
            script_path("heal_train.py")
