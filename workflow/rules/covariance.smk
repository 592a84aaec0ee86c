# Stage covariance (CARE, thesis 3.3.1-3.3.2): K/V input statistics of a model on N calibration
# windows of T tokens from one calibration set. {calib} is "<set>-n<N>-t<T>" (plan.names.Calib).


if PLAN.care:

    rule covariance_collect:
        input:
            model=P.MODEL,
            data=PLAN.care.calib_data,
        output:
            P.COVARIANCE,
        log:
            P.LOG["covariance_collect"],
        benchmark:
            P.BENCH["covariance_collect"]
        wildcard_constraints:
            calib=WILDCARDS["covariance"],
        conda:
            env_path("training")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("covariance_collect"),
        params:
            job=PLAN.params("covariance_collect"),
        script:
            script_path("covariance_collect.py")
