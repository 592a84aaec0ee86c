# Stage pipeline (document 003, PipeInfer): the target's decoder layers split over processes
# (torch.distributed, gloo), started by torchrun on this machine; iterative, speculative
# (SpecInfer-style) and PipeInfer strategies side by side on the same prompts, beside the
# one-process engine. The job takes the whole machine (threads: workflow.cores) so nothing runs
# beside it.


if PLAN.pipeline:

    rule pipeline_run:
        input:
            **PLAN.pipeline.inputs(),
        output:
            P.PIPELINE_RUNS,
        log:
            P.LOG["pipeline_run"],
        benchmark:
            P.BENCH["pipeline_run"]
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("pipeline_run"),
        params:
            job=PLAN.params("pipeline_run"),
        script:
            script_path("pipeline_run.py")

    # Figure 9: the same strategies for one more target/draft pair at the figure's stage
    # count (the same stage function as pipeline_run; the whole machine too).
    rule pipeline_pair:
        input:
            unpack(PLAN.pipeline.pair_inputs),
        output:
            P.PIPELINE_PAIR,
        log:
            P.LOG["pipeline_pair"],
        benchmark:
            P.BENCH["pipeline_pair"]
        wildcard_constraints:
            draft=one_of(PLAN.base.models),
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("pipeline_pair"),
        params:
            job=PLAN.params("pipeline_pair"),
        script:
            script_path("pipeline_run.py")

    # The simulator (kvspec.pipeline.simulate) calibrated on the runs above: validation against
    # them, then node counts, links and acceptance rates beyond this machine (seconds of work).
    rule pipeline_simulate:
        input:
            PLAN.pipeline.output(),
        output:
            P.PIPELINE_SIMULATED,
        log:
            P.LOG["pipeline_simulate"],
        conda:
            env_path("evaluation")
        threads: 1
        resources:
            **PLAN.resources("pipeline_simulate"),
        params:
            job=PLAN.params("pipeline_simulate"),
        script:
            script_path("pipeline_simulate.py")
