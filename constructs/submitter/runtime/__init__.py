"""The job submitter's Lambda runtime code (deployed by :mod:`platform_constructs.submitter`).

Modules import each other relatively, and the shared pure-Python contracts as
``platform_spec.*``, ``model_families.*`` and ``planner.*``, so the same code
runs in the Lambda bundle, in ``trainctl submit --local`` and in tests.
"""
