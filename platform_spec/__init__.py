"""The platform's facts, one home each: a pure package (standard library only) that the trainer, the
planner, the Lambda functions, the CDK app and ``trainctl`` all import.

Modules:

* :mod:`platform_spec.errors` -- :class:`~platform_spec.errors.FieldError`, the one field-level error type.
* :mod:`platform_spec.precisions` -- the precision registry (dtype, TE recipe, bytes, peak, hardware rule).
* :mod:`platform_spec.catalogue` -- GPUs and SageMaker instance types, every figure with its source;
  the default instance type; which types the trainer image runs on.
* :mod:`platform_spec.hyperparameters` -- the trainer's hyperparameter specs.
* :mod:`platform_spec.metric_lines` -- the trainer's metric lines and SageMaker's regexes for them, and its
  ``[run]`` records (how a run began and ended, on which device).
* :mod:`platform_spec.capacity` -- capacity facts (the capacity types and their default order, the plan
  statuses a job may use, the reclaim window, the pending limit).
* :mod:`platform_spec.files` -- the one atomic, durable file write (records other processes read).
* :mod:`platform_spec.training_plans` -- the training-plan ARN rule.
* :mod:`platform_spec.trainer_image` -- the trainer image's NGC base release and its TransformerEngine, PyTorch,
  CUDA and NCCL versions.
* :mod:`platform_spec.network` -- the EC2 actions SageMaker needs of a job's execution role in VPC mode.
* :mod:`platform_spec.models` -- the model-family interface and registry (families live in
  ``model_families/``) and :class:`~platform_spec.models.ModelShape`, the shapes' protocol.

Nothing here imports torch, numpy, boto3, botocore, the CDK or any other package of this repository
(``model_families`` is found by name at the registry's first lookup: :mod:`platform_spec.models`);
``tests/test_layers.py`` enforces it.
"""
