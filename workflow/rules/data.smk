# Stage data: every dataset declared in config -> one normalized JSONL file.


rule data_normalize:
    output:
        data="results/data/{dataset}.jsonl",
        meta="results/data/{dataset}.meta.json",
    log:
        "logs/data/{dataset}.log",
    conda:
        env_path("training")
    params:
        spec=dataset_spec,
        mirror=config["data"]["mirror"],
    script:
        script_path("data_normalize.py")


rule data_sources:
    input:
        expand("results/data/{dataset}.meta.json", dataset=DATASETS),
    output:
        csv=report(
            "results/report/data_sources.csv",
            caption="../report/data_sources.rst",
            category="Data",
            labels={"item": "data sources", "format": "csv"},
        ),
        md="results/report/data_sources.md",
    log:
        "logs/data/sources.log",
    conda:
        env_path("report")
    params:
        notes=dataset_notes(),
    script:
        script_path("data_sources.py")
