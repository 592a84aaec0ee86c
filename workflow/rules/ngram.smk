# Stage ngram (thesis 4.3.1): infini-gram suffix-array indexes over SFT responses (the size
# sweep of Table 4.1 as nested fractions) and over each target model's own responses.


if PLAN.spec:

    rule ngram_index:
        input:
            unpack(PLAN.spec.index_inputs),
        output:
            index=directory(P.INDEX),
            stats=P.INDEX_STATS,
        log:
            P.LOG["ngram_index"],
        benchmark:
            P.BENCH["ngram_index"]
        wildcard_constraints:
            model=one_of(PLAN.spec.models),
            corpus=WILDCARDS["corpus"],
            fraction=one_of(PLAN.spec.fractions),
        conda:
            env_path("evaluation")
        threads: WORK_THREADS
        resources:
            **PLAN.resources("ngram_index"),
        params:
            job=PLAN.params("ngram_index"),
        script:
            script_path("ngram_index.py")
