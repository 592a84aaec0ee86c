# Stage pretrain (mini and ci scales): corpus -> tokenizer -> token streams -> models.


rule pretrain_corpus:
    input:
        **PLAN.base.pretrain_sources(),
    output:
        P.PRETRAIN_CORPUS,
    log:
        P.LOG["pretrain_corpus"],
    conda:
        env_path("training")
    resources:
        **PLAN.resources("pretrain_corpus"),
    params:
        job=PLAN.params("pretrain_corpus"),
    script:
        script_path("pretrain_corpus.py")


rule pretrain_tokenizer:
    input:
        P.PRETRAIN_CORPUS,
    output:
        directory(P.TOKENIZER),
    log:
        P.LOG["pretrain_tokenizer"],
    benchmark:
        P.BENCH["pretrain_tokenizer"]
    conda:
        env_path("training")
    resources:
        **PLAN.resources("pretrain_tokenizer"),
    params:
        job=PLAN.params("pretrain_tokenizer"),
    script:
        script_path("pretrain_tokenizer.py")


rule pretrain_tokenize:
    input:
        corpus=P.PRETRAIN_CORPUS,
        tokenizer=P.TOKENIZER,
    output:
        train=P.PRETRAIN_TRAIN,
        val=P.PRETRAIN_VAL,
        stats=P.PRETRAIN_TOKENS,
    log:
        P.LOG["pretrain_tokenize"],
    benchmark:
        P.BENCH["pretrain_tokenize"]
    conda:
        env_path("training")
    resources:
        **PLAN.resources("pretrain_tokenize"),
    params:
        job=PLAN.params("pretrain_tokenize"),
    script:
        script_path("pretrain_tokenize.py")


rule pretrain_train:
    input:
        tokenizer=P.TOKENIZER,
        train=P.PRETRAIN_TRAIN,
        val=P.PRETRAIN_VAL,
    output:
        model=directory(P.MODEL),
        curve=P.PRETRAIN_CURVE,
        stats=P.PRETRAIN_STATS,
    log:
        P.LOG["pretrain_train"],
    benchmark:
        P.BENCH["pretrain_train"]
    wildcard_constraints:
        model=one_of(PLAN.base.pretrained),
    conda:
        env_path("training")
    threads: WORK_THREADS
    resources:
        **PLAN.resources("pretrain_train"),
    params:
        job=PLAN.params("pretrain_train"),
    script:
        script_path("pretrain_train.py")
