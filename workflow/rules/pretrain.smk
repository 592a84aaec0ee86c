# Stage pretrain (mini and ci scales): corpus -> tokenizer -> token streams -> models.


rule pretrain_corpus:
    input:
        **PLAN.base.pretrain_sources(),
    output:
        "results/pretrain/corpus.jsonl",
    log:
        "logs/pretrain/corpus.log",
    conda:
        env_path("training")
    params:
        kinds=PLAN.base.pretrain_kinds(),
        stdlib_bytes=config["pretrain"]["python_stdlib_bytes"],
    script:
        script_path("pretrain_corpus.py")


rule pretrain_tokenizer:
    input:
        "results/pretrain/corpus.jsonl",
    output:
        directory("results/models/tokenizer"),
    log:
        "logs/pretrain/tokenizer.log",
    benchmark:
        "benchmarks/pretrain/tokenizer.tsv"
    conda:
        env_path("training")
    params:
        tokenizer=config["tokenizer"],
        seed=config["seed"],
    script:
        script_path("pretrain_tokenizer.py")


rule pretrain_tokenize:
    input:
        corpus="results/pretrain/corpus.jsonl",
        tokenizer="results/models/tokenizer",
    output:
        train="results/pretrain/tokens/train.npy",
        val="results/pretrain/tokens/val.npy",
        stats="results/pretrain/tokens/stats.json",
    log:
        "logs/pretrain/tokenize.log",
    benchmark:
        "benchmarks/pretrain/tokenize.tsv"
    conda:
        env_path("training")
    params:
        val_fraction=config["pretrain"]["val_fraction"],
        seed=config["seed"],
    script:
        script_path("pretrain_tokenize.py")


rule pretrain_train:
    input:
        tokenizer="results/models/tokenizer",
        train="results/pretrain/tokens/train.npy",
        val="results/pretrain/tokens/val.npy",
    output:
        model=directory("results/models/{model}"),
        curve="results/pretrain/{model}/loss.csv",
        stats="results/pretrain/{model}/stats.json",
    log:
        "logs/pretrain/{model}.log",
    benchmark:
        "benchmarks/pretrain/{model}.tsv"
    wildcard_constraints:
        model=one_of(PLAN.base.pretrained),
    conda:
        env_path("training")
    threads: 2
    resources:
        mem_mb=6000,
        runtime=120,
    params:
        decl=lookup(dpath="models/{model}/pretrain", within=config),
        seed=config["seed"],
        checkpoint="resources/checkpoints/pretrain/{model}.pt",
    script:
        script_path("pretrain_train.py")
