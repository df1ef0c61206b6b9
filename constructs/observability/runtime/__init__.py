"""Runtime code of the observability functions (deployed by :mod:`platform_constructs.observability`).

* :mod:`.plan_metrics`: the training-plan capacity publisher (EventBridge schedule);
* :mod:`.job_events`: the job-state handler (EventBridge rule on
  ``SageMaker Training Job State Change``);
* :mod:`.settings`: names shared with the construct (namespaces, metric names,
  dimensions, environment variables).

Modules import each other relatively, so the same code runs as the top-level
package ``runtime`` in the Lambda bundle and as
``platform_constructs.observability.runtime`` in tests and tools. Only boto3
and aws-lambda-powertools are needed (no CDK, no torch).
"""
