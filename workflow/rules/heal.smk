# Stage heal (CARE, thesis 3.3.6 and Table 3.3): full MLA restoration (TransMLA layout, with
# weight-space or CARE's covariance-weighted latent), then CE + KD healing of every student
# with a checkpoint at each token budget (evaluated in evaluate.smk).
# {method} is svd (the plain SVD MLA model), transmla, transmla-pca or transmla-care;
# {variant} is a row of the Table 3.3 ablation (care.heal.ablation.variants).
# A restoration is temp(): deleted once its healing job has read it (rebuilt in seconds when
# healing reruns; `snakemake --notemp` keeps it). The decode-speed job rebuilds its own.


if PLAN.heal:

    rule heal_restore:
        input:
            model=P.MODEL,
            stats=PLAN.heal.restore_stats,
        output:
            temp(directory(P.HEAL_INIT)),
        log:
            P.LOG["heal_restore"],
        benchmark:
            P.BENCH["heal_restore"]
        wildcard_constraints:
            method=one_of(PLAN.heal.restored()),
        conda:
            env_path("training")
        threads: 1
        resources:
            **PLAN.resources("heal_restore"),
        params:
            job=PLAN.params("heal_restore"),
        script:
            script_path("heal_restore.py")

    rule heal_train:
        input:
            student=PLAN.heal.student,
            teacher=P.MODEL,
            data=PLAN.heal.data(),
        output:
            models=[directory(path) for path in PLAN.heal.checkpoints()],
            curve=P.HEAL_CURVE,
            stats=P.HEAL_STATS,
        log:
            P.LOG["heal_train"],
        benchmark:
            P.BENCH["heal_train"]
        wildcard_constraints:
            method=one_of(PLAN.heal.methods),
        conda:
            env_path("training")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("heal_train"),
        params:
            job=PLAN.params("heal_train"),
        script:
            script_path("heal_train.py")

    if PLAN.heal.ablation():

        rule heal_ablation:
            input:
                model=P.MODEL,
                stats=PLAN.heal.ablation_stats,
                data=PLAN.heal.data(),
            output:
                P.HEAL_ABLATION,
            log:
                P.LOG["heal_ablation"],
            benchmark:
                P.BENCH["heal_ablation"]
            wildcard_constraints:
                variant=one_of(PLAN.heal.ablation()),
            conda:
                env_path("training")
            threads: WORK_THREADS
            resources:
                **PLAN.resources("heal_ablation"),
            params:
                job=PLAN.params("heal_ablation"),
            script:
                script_path("heal_ablation.py")
