# Helpers shared by every stage (the only place with Python helpers).
import re
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from kvspec.config import ConfigError, validate

try:
    _validated = validate(
        config,
        yaml.safe_load(
            open(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
        ),
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None
config.clear()
config.update(_validated)

DATASETS = sorted(config["data"]["datasets"])
MODELS = sorted(config["models"])
PRETRAINED = [m for m in MODELS if config["models"][m]["pretrain"]]
HUB_MODELS = [m for m in MODELS if not config["models"][m]["pretrain"]]


def one_of(names):
    """A wildcard regex matching exactly the given names (nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    dataset=one_of(DATASETS),
    model=one_of(MODELS),


def repo_path(relative):
    """Absolute path of a file shipped in the repository (configs, captions, paper numbers)."""
    return str(Path(workflow.basedir) / relative)


def script_path(name):
    """Path of scripts/<name>, relative to the including .smk file as Snakemake expects."""
    return f"../../scripts/{name}"


def env_path(name):
    """Path of envs/<name>.yaml for the conda: directive."""
    return f"../../envs/{name}.yaml"


def dataset_spec(wildcards):
    """The dataset's declaration, less its free-text note (editing a note reruns nothing)."""
    spec = config["data"]["datasets"][wildcards.dataset]
    return {k: v for k, v in spec.items() if k != "note"}


def dataset_note(wildcards):
    return config["data"]["datasets"][wildcards.dataset]["note"]


def pretrain_spec(wildcards):
    return config["models"][wildcards.model]["pretrain"]


def hub_model_id(wildcards):
    return config["models"][wildcards.model]["hub"]


def pretrain_sources(wildcards):
    return {n: f"results/data/{n}.jsonl" for n in config["pretrain"]["sources"]}


def pretrain_source_kinds(wildcards):
    return {
        n: config["data"]["datasets"][n]["kind"] for n in config["pretrain"]["sources"]
    }


def pretrain_report_outputs():
    if not PRETRAINED:
        return []
    return expand(
        "results/report/pretrain_{item}",
        item=["loss.png", "loss.pdf", "summary.csv", "summary.md"],
    )


def care_outputs():
    """Final products of the CARE stages (covariance, convert, evaluate; thesis ch. 3)."""
    return []


def spec_outputs():
    """Final products of the speculative-decoding stages (generate, ngram, specdecode; ch. 4)."""
    return []


def all_outputs():
    """Every final product of the configured scale."""
    return [
        *expand("results/data/{dataset}.jsonl", dataset=DATASETS),
        *expand("results/models/{model}", model=MODELS),
        "results/report/thesis_table_2_1.csv",
        "results/report/thesis_table_2_1.md",
        "results/report/data_sources.csv",
        "results/report/data_sources.md",
        *pretrain_report_outputs(),
        *care_outputs(),
        *spec_outputs(),
    ]
