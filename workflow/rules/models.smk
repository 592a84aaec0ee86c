# Stage models: models given by hub id are downloaded once and saved locally (paper scale);
# draft models are distilled here from their target, on its greedy responses (mini, ci).


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


rule models_distil:
    input:
        unpack(PLAN.base.distil_inputs),
    output:
        model=directory("results/models/{model}"),
        curve="results/distil/{model}/curve.csv",
        stats="results/distil/{model}/stats.json",
    log:
        "logs/distil/{model}.log",
    benchmark:
        "benchmarks/distil/{model}.tsv"
    wildcard_constraints:
        model=one_of(PLAN.base.distilled),
    conda:
        env_path("training")
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=config["resources"]["gpus"],
    params:
        decl=lookup(dpath="models/{model}/distil", within=config),
        seed=config["seed"],
        checkpoint="resources/checkpoints/distil/{model}.pt",
        device=config["resources"]["device"],
        dtype=config["resources"]["dtype"],
    script:
        script_path("models_distil.py")
