# Report items of the speculative-decoding stages: thesis Tables 4.1-4.8 and Figure 4.1.


rule report_spec_acceptance:
    input:
        **spec_paper_tables(range(1, 7)),
        sweep=spec_sweep_acceptance(),
        stats=spec_index_stats(),
        main=spec_main_acceptance(),
    output:
        **spec_report_items(range(1, 7), "Thesis ch. 4: acceptance"),
        f4_1_png=report(
            "results/report/thesis_figure_4_1.png",
            caption="../report/thesis_figure_4_1.rst",
            category="Thesis ch. 4: acceptance",
            labels={"item": "Figure 4.1", "format": "png"},
        ),
        f4_1_pdf="results/report/thesis_figure_4_1.pdf",
        f4_1_csv="results/report/thesis_figure_4_1.csv",
    log:
        "logs/report/spec_acceptance.log",
    conda:
        env_path("report")
    params:
        settings=spec_cfg("acceptance"),
    script:
        script_path("report_spec_acceptance.py")


rule report_spec_speed:
    input:
        **spec_paper_tables(range(7, 9)),
        main=spec_speed_summaries(True),
        other=spec_speed_summaries(False),
    output:
        **spec_report_items(range(7, 9), "Thesis ch. 4: speed"),
    log:
        "logs/report/spec_speed.log",
    conda:
        env_path("report")
    params:
        columns=spec_table_4_7_columns(),
        labels=spec_set_labels(),
    script:
        script_path("report_spec_speed.py")
