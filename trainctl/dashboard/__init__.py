"""The platform's CloudWatch dashboard and alarms, as ``trainctl dashboard`` exports them.

* :mod:`~trainctl.dashboard.template` -- the dashboard body and the alarms read out of a synthesized template;
* :mod:`~trainctl.dashboard.preview` -- a PNG of the dashboard's layout;
* :mod:`~trainctl.dashboard.export` -- synthesize the app, write the JSON and the PNG, list the alarms.
"""
