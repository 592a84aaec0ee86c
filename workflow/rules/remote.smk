# Stage remote (document 002, Tables 3, 4, 7): each trained head of the moa stage on a client,
# its target on a real server process, over TCP on the loopback through the emulated 5G / 4G
# links (shaped in the transport); HumanEval answers with EAGLE-2 trees, then the link cut
# after B new tokens and the client finishing alone. One job per head.


if PLAN.remote:

    rule remote_run:
        input:
            unpack(PLAN.remote.run_inputs),
        output:
            P.REMOTE_RUNS,
        log:
            P.LOG["remote_run"],
        benchmark:
            P.BENCH["remote_run"]
        conda:
            env_path("evaluation")
        threads: workflow.cores  # timed: holds the machine
        resources:
            **PLAN.resources("remote_run"),
        params:
            job=PLAN.params("remote_run"),
        script:
            script_path("remote_run.py")
