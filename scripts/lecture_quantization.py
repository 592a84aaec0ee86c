"""Rule lecture_quantization: the toy example and the model under RTN / mixed / AWQ weights."""

from kvspec.lecture.stages import quantization_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    quantization_stage(
        snakemake.input.model,
        snakemake.input.calibration,
        snakemake.output[0],
        settings=p.settings,
        calib_kind=p.calib_kind,
        tasks=p.tasks,
        task_dir=p.task_dir,
        eval_settings=p.eval_settings,
        seed=p.seed,
        threads=snakemake.threads,
    )
