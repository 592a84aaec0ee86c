# Stage data: every dataset declared in config -> one normalized JSONL file (+ where it came
# from). The data-sources table is a report item (report.smk).


rule data_normalize:
    output:
        data=P.DATA,
        meta=P.DATA_META,
    log:
        P.LOG["data_normalize"],
    conda:
        env_path("training")
    resources:
        **PLAN.resources("data_normalize"),
    params:
        job=PLAN.params("data_normalize"),
    script:
        script_path("data_normalize.py")
