# Stage convert (CARE, thesis 3.3.3-3.3.5): full-rank factors and spectra per method, rank plans
# (uniform / water-filling, and the Figure 3.1 sensitivity plans), MLA model directories (only
# for the jobs that read a saved one: healing and decode speed; evaluate_lmeval converts itself).
# {fact} is svd, asvd or care; {calib} is a calibration tag, or "none" for plain SVD; {plan} a
# rank plan (kvspec.plan.names).


if PLAN.care:

    rule convert_factorize:
        input:
            unpack(PLAN.care.factor_inputs),
        output:
            P.FACTORS,
        log:
            P.LOG["convert_factorize"],
        benchmark:
            P.BENCH["convert_factorize"]
        wildcard_constraints:
            fact=WILDCARDS["fact"],
            calib=WILDCARDS["calib"],
        conda:
            env_path("training")
        threads: 1
        resources:
            **PLAN.resources("convert_factorize"),
        params:
            job=PLAN.params("convert_factorize"),
        script:
            script_path("convert_factorize.py")

    rule convert_allocate:
        input:
            P.FACTORS,
        output:
            P.RANK_PLAN_ALLOCATED,
        log:
            P.LOG["convert_allocate"],
        wildcard_constraints:
            fact=WILDCARDS["fact"],
            alloc=WILDCARDS["alloc"],
            rank=WILDCARDS["rank"],
        conda:
            env_path("training")
        threads: 1
        resources:
            **PLAN.resources("convert_allocate"),
        params:
            job=PLAN.params("convert_allocate"),
        script:
            script_path("convert_allocate.py")

    rule convert_sensitivity:
        input:
            P.FACTORS,
        output:
            P.RANK_PLAN,
        log:
            P.LOG["convert_sensitivity"],
        wildcard_constraints:
            fact=WILDCARDS["fact"],
            plan=WILDCARDS["sensitivity"],
        conda:
            env_path("training")
        threads: 1
        resources:
            **PLAN.resources("convert_sensitivity"),
        params:
            job=PLAN.params("convert_sensitivity"),
        script:
            script_path("convert_sensitivity.py")

    rule convert_mla:
        input:
            model=P.MODEL,
            factors=P.FACTORS,
            plan=P.RANK_PLAN,
        output:
            directory(P.CONVERTED),
        log:
            P.LOG["convert_mla"],
        benchmark:
            P.BENCH["convert_mla"]
        wildcard_constraints:
            fact=WILDCARDS["fact"],
            plan=WILDCARDS["plan"],
        conda:
            env_path("training")
        threads: 1
        resources:
            **PLAN.resources("convert_mla"),
        script:
            script_path("convert_mla.py")

    if PLAN.care.decode_speed:

        rule convert_decode_speed:
            input:
                PLAN.decode_speed_inputs(),
            output:
                P.DECODE_SPEED,
            log:
                P.LOG["convert_decode_speed"],
            benchmark:
                P.BENCH["convert_decode_speed"]
            wildcard_constraints:
                model=one_of([PLAN.care.main]),
            conda:
                env_path("evaluation")
            threads: workflow.cores  # timed: holds the machine
            resources:
                **PLAN.resources("convert_decode_speed"),
            params:
                job=PLAN.params("convert_decode_speed"),
            script:
                script_path("convert_decode_speed.py")
