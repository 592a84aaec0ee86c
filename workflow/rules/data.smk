# Stage data: every dataset declared in config -> one normalized JSONL file.


rule data_normalize:
    output:
        "results/data/{dataset}.jsonl",
    log:
        "logs/data/{dataset}.log",
    conda:
        env_path("kvspec")
    params:
        spec=dataset_spec,
        mirror=config["data"]["mirror"],
    script:
        script_path("data_normalize.py")
