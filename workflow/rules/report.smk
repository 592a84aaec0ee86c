# Stage report: every table and figure, the documents' numbers beside ours.


rule report_table_2_1:
    input:
        paper=repo_path("config/paper_results/thesis_table_2_1.csv"),
    output:
        csv=report(
            "results/report/thesis_table_2_1.csv",
            caption="../report/thesis_table_2_1.rst",
            category="Thesis ch. 2",
            labels={"item": "Table 2.1", "format": "csv"},
        ),
        md="results/report/thesis_table_2_1.md",
    log:
        "logs/report/thesis_table_2_1.log",
    conda:
        env_path("report")
    script:
        script_path("report_paper_table.py")


rule report_pretrain:
    input:
        curves=expand("results/pretrain/{model}/loss.csv", model=PRETRAINED),
        stats=expand("results/pretrain/{model}/stats.json", model=PRETRAINED),
        tokens="results/pretrain/tokens/stats.json",
    output:
        png=report(
            "results/report/pretrain_loss.png",
            caption="../report/pretrain_loss.rst",
            category="Pretraining",
            labels={"item": "loss curves", "format": "png"},
        ),
        pdf="results/report/pretrain_loss.pdf",
        csv=report(
            "results/report/pretrain_summary.csv",
            caption="../report/pretrain_summary.rst",
            category="Pretraining",
            labels={"item": "summary", "format": "csv"},
        ),
        md="results/report/pretrain_summary.md",
    log:
        "logs/report/pretrain.log",
    conda:
        env_path("report")
    params:
        models=PRETRAINED,
    script:
        script_path("report_pretrain.py")
