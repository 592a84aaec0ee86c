# Stage specdecode (thesis 4.3.3, 4.5): acceptance analysis of the indexes (no decoding) and
# speed benchmarks of every decoding method on the same prompts at batch size 1.


rule specdecode_acceptance:
    input:
        unpack(acceptance_inputs),
    output:
        "results/acceptance/{model}/{corpus}_{fraction}/{responses}/{heldout}.csv",
    log:
        "logs/acceptance/{model}/{corpus}_{fraction}/{responses}/{heldout}.log",
    benchmark:
        "benchmarks/acceptance/{model}/{corpus}_{fraction}/{responses}/{heldout}.tsv"
    wildcard_constraints:
        model=one_of(SPEC_GEN_MODELS),
        corpus="sft|responses",
        fraction=one_of(SPEC_FRACTIONS),
        responses="sft|target",
        heldout=one_of(SPEC_HELDOUT),
    conda:
        env_path("evaluation")
    threads: 1
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=config["resources"]["gpus"],
    params:
        max_support=spec_cfg("index", "max_support"),
        temperature=spec_cfg("acceptance", "temperature"),
        max_tokens=spec_cfg("generate", "max_new_tokens"),
        device=config["resources"]["device"],
        dtype=config["resources"]["dtype"],
    script:
        script_path("specdecode_acceptance.py")


rule specdecode_speed:
    input:
        unpack(speed_inputs),
    output:
        runs="results/specdecode/{model}/{bench}/runs.json",
        summary="results/specdecode/{model}/{bench}/summary.csv",
    log:
        "logs/specdecode/{model}/{bench}.log",
    benchmark:
        "benchmarks/specdecode/{model}/{bench}.tsv"
    wildcard_constraints:
        model=one_of(SPEC_GEN_MODELS),
        bench=one_of(SPEC_BENCH_SETS),
    conda:
        env_path("evaluation")
    threads: 2
    resources:
        mem_mb=16000,
        runtime=240,
        gpu=config["resources"]["gpus"],
    params:
        methods=speed_methods,
        bench=speed_set,
        decode=spec_cfg("decode"),
        max_new_tokens=spec_cfg("speed", "max_new_tokens"),
        repeats=spec_cfg("speed", "repeats"),
        max_support=spec_cfg("index", "max_support"),
        device=config["resources"]["device"],
        dtype=config["resources"]["dtype"],
        seed=config["seed"],
    script:
        script_path("specdecode_speed.py")
