"""The job submitter: a Lambda function that turns a job request into ``CreateTrainingJob``.

* :mod:`.construct` -- the CDK construct (:class:`~.construct.JobSubmitter`, its props and
  :class:`~.construct.ISubmitterMetrics`);
* :mod:`.bundling` -- the Lambda package, built from declared roots (the runtime and the pure packages);
* :mod:`.runtime` -- the function's code, a plain package (no CDK).

This file imports nothing, so importing the runtime (``import
platform_constructs.submitter.runtime.handler``, as Lambda, ``trainctl submit
--local`` and the tests do) never imports aws-cdk-lib or jsii.
"""
