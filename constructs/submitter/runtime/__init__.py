"""The job submitter's Lambda runtime code (deployed by :mod:`platform_constructs.submitter.construct`).

A plain package: importing it (or :mod:`.handler`) never imports the CDK, so
Lambda, ``trainctl submit --local`` and the tests all import it as
``platform_constructs.submitter.runtime``. Its modules import each other
relatively, and the shared pure-Python contracts as ``platform_spec.*``,
``model_families.*`` and ``planner.*``; the deployment package is this
folder and those packages, laid out under the same names
(:data:`platform_constructs.submitter.bundling.SUBMITTER`).
"""
