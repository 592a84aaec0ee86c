# Shared by every stage file: the validated config, the experiment plan, wildcard constraints
# and path helpers. Which jobs, variants and report rows exist is decided by kvspec.plan; every
# path pattern is kvspec.plan.paths (P) and every wildcard's regex kvspec.plan.names.
import re
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from kvspec.config import ConfigError, validate
from kvspec.models.access import AccessError, check_run
from kvspec.plan import Plan
from kvspec.plan import paths as P
from kvspec.plan.names import WILDCARDS

_schema = Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"
try:
    _validated = validate(config, yaml.safe_load(_schema.read_text()))
    PLAN = Plan(_validated, Path(workflow.basedir))
except ConfigError as err:
    raise WorkflowError(str(err)) from None
config.clear()
config.update(_validated)
# threads of an untimed multi-threaded job (training, calibration, generation, indexing); timed
# jobs take every core (threads: workflow.cores) so that nothing runs beside them
WORK_THREADS = config["resources"]["threads"]


onstart:  # before the first job, not in a dry run: gated hub models need a working HF_TOKEN
    try:
        check_run(config, P.MODEL)
    except AccessError as err:
        raise WorkflowError(str(err)) from None


def one_of(names):
    """A wildcard regex matching exactly the given names (nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    dataset=one_of(PLAN.base.datasets),
    model=one_of(PLAN.base.models),


def script_path(name):
    """Path of scripts/<name>, relative to the including .smk file as Snakemake expects."""
    return f"../../scripts/{name}"


def env_path(name):
    """Path of envs/<name>.yaml for the conda: directive."""
    return f"../../envs/{name}.yaml"


def report_outputs(item):
    """A report item's outputs; those with a caption are attached to the Snakemake report."""
    attach = report  # (a line may not start with `report`: that is the report: keyword)
    return {
        key: (
            attach(
                out.path,
                caption=f"../report/{out.caption}.rst",
                category=item.category,
                labels={"item": out.label, "format": out.format},
            )
            if out.caption
            else out.path
        )
        for key, out in item.outputs.items()
    }
