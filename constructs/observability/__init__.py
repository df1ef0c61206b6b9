"""Platform observability: the dashboard, the alarms a platform team acts on, and their functions.

* :mod:`.construct` -- :class:`~.construct.PlatformObservability`, which composes the rest;
* :mod:`.functions` -- the plan-metrics publisher and the job-state handler (Lambda);
* :mod:`.notifications` -- the alarm topic and its subscriptions;
* :mod:`.widgets` -- the dashboard's widgets;
* :mod:`.runtime` -- the functions' code, a plain package (no CDK).

This file imports nothing, so importing the runtime never imports aws-cdk-lib or jsii.
"""
