# Stage models: models given by hub id are downloaded once and saved locally (paper scale).


rule models_fetch:
    output:
        directory("results/models/{model}"),
    log:
        "logs/models/{model}.log",
    benchmark:
        "benchmarks/models/{model}.tsv"
    wildcard_constraints:
        model=one_of(PLAN.base.hub_models),
    conda:
        env_path("training")
    resources:
        mem_mb=64000,
        runtime=120,
    params:
        hub=lookup(dpath="models/{model}/hub", within=config),
        dtype=config["resources"]["dtype"],
    script:
        script_path("models_fetch.py")
