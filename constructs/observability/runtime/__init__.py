"""Runtime code of the observability functions (deployed by :mod:`platform_constructs.observability.functions`).

* :mod:`.plan_metrics`: the training-plan capacity publisher (EventBridge schedule);
* :mod:`.job_events`: the job-state handler (EventBridge rule on
  ``SageMaker Training Job State Change``);
* :mod:`.settings`: names shared with the construct (namespaces, metric names,
  dimensions, environment variables).

A plain package: importing it never imports the CDK, so Lambda, tests and tools
all import it as ``platform_constructs.observability.runtime``; its modules
import each other relatively. The deployment package is this folder and
``platform_spec``, laid out under the same names
(``platform_constructs.observability.functions.PACKAGE``), with boto3 and
aws-lambda-powertools (no CDK, no torch, no planner).
"""
