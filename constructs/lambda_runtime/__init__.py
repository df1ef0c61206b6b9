"""Code every Lambda runtime of the platform shares: each function's package carries it (``LambdaPackage.roots``).

* :mod:`.deadline` -- botocore's clients bounded by the invocation's deadline: every AWS call a function makes
  ends inside the time Lambda gives it (the submitter's, the continuation's and the observability functions').

A plain package: it imports botocore only (never the CDK), and nothing of the runtimes that use it.
"""
