# Stage evaluate (CARE, thesis 3.4): lm-eval on the original GQA model, on every converted MLA
# model and on every healed checkpoint. Each evaluation runs only the columns that some table
# or figure reads from it (PLAN.evaluate).


if PLAN.care:

    rule evaluate_original:
        input:
            model=P.MODEL,
            data=PLAN.evaluate.original_data,
        output:
            P.EVALUATION_ORIGINAL,
        log:
            P.LOG["evaluate_original"],
        benchmark:
            P.BENCH["evaluate_original"]
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("evaluate_original"),
        params:
            job=PLAN.params("evaluate_original"),
        script:
            script_path("evaluate_lmeval.py")

    # The MLA model of the rank plan is converted inside the job (what convert_mla saves, in a
    # scratch directory removed after scoring): one job and no kept copy per evaluated plan.
    rule evaluate_lmeval:
        input:
            model=P.MODEL,
            factors=P.FACTORS,
            plan=P.RANK_PLAN,
            data=PLAN.evaluate.converted_data,
        output:
            P.EVALUATION_CONVERTED,
        log:
            P.LOG["evaluate_lmeval"],
        benchmark:
            P.BENCH["evaluate_lmeval"]
        wildcard_constraints:
            fact=WILDCARDS["fact"],
            plan=WILDCARDS["plan"],
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("evaluate_lmeval"),
        params:
            job=PLAN.params("evaluate_lmeval"),
        script:
            script_path("evaluate_lmeval.py")


if PLAN.heal:

    rule evaluate_healed:
        input:
            model=P.HEALED,
            data=PLAN.evaluate.healed_data,
        output:
            P.EVALUATION_HEALED,
        log:
            P.LOG["evaluate_healed"],
        benchmark:
            P.BENCH["evaluate_healed"]
        wildcard_constraints:
            method=one_of(PLAN.heal.methods if PLAN.heal else []),
            budget=WILDCARDS["budget"],
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("evaluate_healed"),
        params:
            job=PLAN.params("evaluate_healed"),
        script:
            script_path("evaluate_lmeval.py")
