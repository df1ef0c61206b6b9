"""Sweep reports: throughput, memory and convergence of every configuration, side by side.

``trainctl report NAME --out DIR`` (or :func:`trainctl.reports.writer.write_report`)
reads a sweep's state (:mod:`trainctl.sweeps.state`), collects each
configuration's measurements and writes to ``DIR``:

* ``report.md``: one table row per configuration -- skipped, rejected, failed
  and running ones included, with their reasons: status, tokens/s, MFU, peak
  memory, final loss, and the planner's prediction next to the measurement
  (measured / predicted; a configuration skipped for its memory verdict shows
  ``not run`` with the verdict, no predicted speed); then the convergence
  check, in numbers;
* ``throughput_memory.png``: tokens/s (bars, coloured by precision) and peak
  memory (line, right axis) per configuration -- the guide's figure;
* ``loss_curves.png``: loss against step per precision, one panel per
  combination of the other grid values, with each format's divergence from the
  baseline format written on the panel;
* ``report.json``: the same rows and divergences as data.

One module per step:

* :mod:`~trainctl.reports.collection` -- the measurements: a local run's
  ``train.log`` (metric lines and ``[run]`` records), a job's
  ``DescribeTrainingJob`` and CloudWatch Logs;
* :mod:`~trainctl.reports.results` -- one configuration's result (:class:`~trainctl.reports.results.ConfigResult`);
* :mod:`~trainctl.reports.analysis` -- summaries (steady-state medians) and the
  convergence divergence between formats;
* :mod:`~trainctl.reports.charts` -- the two figures;
* :mod:`~trainctl.reports.markdown` -- ``report.md``;
* :mod:`~trainctl.reports.writer` -- the files, and what ``trainctl report`` prints.
"""
