# Stage report: every table and figure, the documents' numbers beside ours. One rule per report
# item of the plan (kvspec.plan.items.ReportItem): its input files, what each row means
# (params.item), and its outputs (those with a caption are attached to the HTML report).


for item in PLAN.report_items():

    rule:
        name:
            item.rule
        input:
            **item.inputs,
        output:
            **report_outputs(item),
        log:
            item.log,
        conda:
            env_path("report")
        resources:
            **PLAN.resources(item.rule),
        params:
            renderer=item.renderer,
            item=item.params,
        script:
            script_path("report_item.py")
