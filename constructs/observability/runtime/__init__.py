"""Runtime code of the observability functions (deployed by :mod:`platform_constructs.observability.functions`).

* :mod:`.plan_metrics`: the training-plan capacity publisher (EventBridge schedule);
* :mod:`.job_events`: the job-state handler (EventBridge rule on
  ``SageMaker Training Job State Change``);
* :mod:`.settings`: names shared with the construct (namespaces, metric names,
  dimensions, environment variables).

A plain package: importing it never imports the CDK, so Lambda, tests and tools
all import it as ``platform_constructs.observability.runtime``; its modules
import each other relatively. The deployment package is what the two handlers
import, laid out under the same names
(``platform_constructs.observability.functions.PACKAGE``): boto3,
aws-lambda-powertools and ``platform_spec``'s training-plan ARN rule (no CDK,
no torch, no planner).
"""
