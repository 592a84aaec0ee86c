# Stage report, CARE items (thesis ch. 3): tables beside the thesis's numbers, figures.
# Each item reads the evaluations (or rank plans) listed by care_report_params in common.smk.


if CARE:

    rule report_care_table_3_1:
        input:
            evals=care_report_inputs("table_3_1"),
            paper=care_report_paper("table_3_1"),
        output:
            csv=report(
                "results/report/thesis_table_3_1.csv",
                caption="../report/thesis_table_3_1.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Table 3.1", "format": "csv"},
            ),
            md="results/report/thesis_table_3_1.md",
        log:
            "logs/report/thesis_table_3_1.log",
        conda:
            env_path("report")
        params:
            item="table_3_1",
            spec=care_report_params("table_3_1"),
        script:
            script_path("report_care.py")

    if CARE["table_3_2_model"]:

        rule report_care_table_3_2:
            input:
                evals=care_report_inputs("table_3_2"),
                paper=care_report_paper("table_3_2"),
            output:
                csv=report(
                    "results/report/thesis_table_3_2.csv",
                    caption="../report/thesis_table_3_2.rst",
                    category="Thesis ch. 3 (CARE)",
                    labels={"item": "Table 3.2", "format": "csv"},
                ),
                md="results/report/thesis_table_3_2.md",
            log:
                "logs/report/thesis_table_3_2.log",
            conda:
                env_path("report")
            params:
                item="table_3_2",
                spec=care_report_params("table_3_2"),
            script:
                script_path("report_care.py")

    rule report_care_table_3_4:
        input:
            evals=care_report_inputs("table_3_4"),
            paper=care_report_paper("table_3_4"),
        output:
            csv=report(
                "results/report/thesis_table_3_4.csv",
                caption="../report/thesis_table_3_4.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Table 3.4", "format": "csv"},
            ),
            md="results/report/thesis_table_3_4.md",
        log:
            "logs/report/thesis_table_3_4.log",
        conda:
            env_path("report")
        params:
            item="table_3_4",
            spec=care_report_params("table_3_4"),
        script:
            script_path("report_care.py")

    rule report_care_table_3_5:
        input:
            evals=care_report_inputs("table_3_5"),
            paper=care_report_paper("table_3_5"),
        output:
            csv=report(
                "results/report/thesis_table_3_5.csv",
                caption="../report/thesis_table_3_5.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Table 3.5", "format": "csv"},
            ),
            md="results/report/thesis_table_3_5.md",
        log:
            "logs/report/thesis_table_3_5.log",
        conda:
            env_path("report")
        params:
            item="table_3_5",
            spec=care_report_params("table_3_5"),
        script:
            script_path("report_care.py")

    rule report_care_figure_3_1:
        input:
            evals=care_report_inputs("figure_3_1"),
            paper=care_report_paper("figure_3_1"),
        output:
            png=report(
                "results/report/thesis_figure_3_1.png",
                caption="../report/thesis_figure_3_1.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Figure 3.1", "format": "png"},
            ),
            pdf="results/report/thesis_figure_3_1.pdf",
            csv="results/report/thesis_figure_3_1.csv",
        log:
            "logs/report/thesis_figure_3_1.log",
        conda:
            env_path("report")
        params:
            item="figure_3_1",
            spec=care_report_params("figure_3_1"),
        script:
            script_path("report_care.py")

    rule report_care_figure_3_3:
        input:
            evals=care_report_inputs("figure_3_3"),
            paper=care_report_paper("figure_3_3"),
        output:
            png=report(
                "results/report/thesis_figure_3_3.png",
                caption="../report/thesis_figure_3_3.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Figure 3.3", "format": "png"},
            ),
            pdf="results/report/thesis_figure_3_3.pdf",
            csv="results/report/thesis_figure_3_3.csv",
        log:
            "logs/report/thesis_figure_3_3.log",
        conda:
            env_path("report")
        params:
            item="figure_3_3",
            spec=care_report_params("figure_3_3"),
        script:
            script_path("report_care.py")

    rule report_care_figure_3_4:
        input:
            evals=care_report_inputs("figure_3_4"),
            paper=care_report_paper("figure_3_4"),
        output:
            png=report(
                "results/report/thesis_figure_3_4.png",
                caption="../report/thesis_figure_3_4.rst",
                category="Thesis ch. 3 (CARE)",
                labels={"item": "Figure 3.4", "format": "png"},
            ),
            pdf="results/report/thesis_figure_3_4.pdf",
            csv="results/report/thesis_figure_3_4.csv",
        log:
            "logs/report/thesis_figure_3_4.log",
        conda:
            env_path("report")
        params:
            item="figure_3_4",
            spec=care_report_params("figure_3_4"),
        script:
            script_path("report_care.py")
