"""Sweeps: the guide's tuning grid as training jobs (or local runs), with state to resume from.

The guide's method is measurement: compare batch sizes, sequence lengths,
precisions and activation checkpointing on the real hardware, then check that
the low-precision formats converge like the baseline before production. A
sweep is that grid as one command::

    trainctl sweep --name b200-grid --grid precision=bf16,fp8,mxfp8 --grid batch_size=1,4,16 \\
        --grid activation_checkpointing=off,full [--base REQUEST.json] [--local | --function NAME]
    trainctl report b200-grid --out reports/b200-grid

One module per step, in order:

* :mod:`~trainctl.sweeps.grid` -- parse the grid, expand it over a base into
  configurations, name them (deterministic ``job_name`` / ``client_token``);
* :mod:`~trainctl.sweeps.pruning` -- skip what the hardware cannot run or the
  planner's memory verdict refuses (``out-of-memory``; ``at-risk`` unless the
  base sets ``accept_memory_risk``: the submitter's rule), with the reason and
  the planner's figures (no speed for what does not run);
* :mod:`~trainctl.sweeps.planning` -- define a sweep (base, with the shape of its
  ``model_config``; grid; target), or resume the existing one of that name
  (:func:`~trainctl.sweeps.planning.plan_sweep`);
* :mod:`~trainctl.sweeps.state` -- the sweep and its configurations, kept in
  ``<sweeps dir>/<name>/sweep.json`` (written after every change);
* :mod:`~trainctl.sweeps.submission` -- AWS: each configuration through the
  job submitter (in process against ``AWS_ENDPOINT_URL`` only, or the deployed
  function), idempotent across reruns;
* :mod:`~trainctl.sweeps.jobs` -- AWS: ``DescribeTrainingJob`` polling until
  every job is terminal;
* :mod:`~trainctl.sweeps.local_runs` -- local: each configuration through the
  container's entry point, how it ended read from the trainer's declared
  ``[run]`` records;
* :mod:`~trainctl.sweeps.progress` -- progress bars on stderr;
* :mod:`~trainctl.sweeps.runner` -- the whole run:
  :func:`~trainctl.sweeps.runner.run_local_sweep`,
  :func:`~trainctl.sweeps.runner.run_aws_sweep`;
* :mod:`~trainctl.sweeps.summary` -- ``trainctl sweep``'s table and exit status.

:mod:`trainctl.reports` turns a sweep's state and its runs' output into a report.
"""
