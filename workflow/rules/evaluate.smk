# Stage evaluate (CARE, thesis 3.4): lm-eval on the original GQA model and on every converted
# MLA model. Each evaluation runs only the columns that some table or figure reads from it.


rule evaluate_original:
    input:
        model="results/models/{model}",
        data=care_eval_data,
    output:
        "results/evaluate/{model}/original.json",
    log:
        "logs/evaluate/{model}/original.log",
    benchmark:
        "benchmarks/evaluate/{model}/original.tsv"
    conda:
        env_path("evaluation")
    threads: 1
    resources:
        mem_mb=40000,
        runtime=240,
        gpu=config["resources"]["gpus"],
    params:
        tasks=care_eval_tasks,
        task_dir=repo_path("config/lm_eval_tasks"),
        settings=care_eval_settings(),
        variant="original",
    script:
        script_path("evaluate_lmeval.py")


rule evaluate_lmeval:
    input:
        model="results/convert/{model}/models/{fact}-{calib}/{plan}",
        data=care_eval_data,
    output:
        "results/evaluate/{model}/{fact}-{calib}/{plan}.json",
    log:
        "logs/evaluate/{model}/{fact}-{calib}/{plan}.log",
    benchmark:
        "benchmarks/evaluate/{model}/{fact}-{calib}/{plan}.tsv"
    wildcard_constraints:
        fact="svd|asvd|care",
        plan=r"(uniform|waterfill)-r\d+|halve-l\d+|svgroup-g\d+",
    conda:
        env_path("evaluation")
    threads: 1
    resources:
        mem_mb=40000,
        runtime=240,
        gpu=config["resources"]["gpus"],
    params:
        tasks=care_eval_tasks,
        task_dir=repo_path("config/lm_eval_tasks"),
        settings=care_eval_settings(),
        variant="{fact}-{calib}/{plan}",
    script:
        script_path("evaluate_lmeval.py")
