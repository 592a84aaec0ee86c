# kvspec: reproduce CARE (GQA -> MLA) and infini-gram speculative decoding.
# Thin on purpose: configuration, the stage files in DAG order, and the targets.
from snakemake.utils import min_version

min_version("9.0")


# The mini scale is the default; `--configfile config/ci.yaml` or `config/paper.yaml` replaces it
# (scales are whole files, never merged with the default).
if not workflow.config_settings.configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"  # also when run with --directory


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/covariance.smk"
include: "workflow/rules/convert.smk"
include: "workflow/rules/heal.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/ngram.smk"
include: "workflow/rules/specdecode.smk"
include: "workflow/rules/sampling.smk"
include: "workflow/rules/lecture.smk"
include: "workflow/rules/pipeline.smk"
include: "workflow/rules/moa.smk"
include: "workflow/rules/remote.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        PLAN.targets(),


# `snakemake <document>` renders one source document's tables and figures (e.g. `thesis`).
for document in PLAN.documents():

    rule:
        name:
            document
        input:
            PLAN.targets(document),
