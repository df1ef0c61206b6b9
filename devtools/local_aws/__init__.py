"""``trainctl local-aws``: an AWS *emulator* for tests and demos (moto + training plans).

It is not AWS, and it is a development tool: moto is the project's optional
extra ``local`` (``pip install .[local]``, which ``make test`` and ``make
demo`` install), imported only when the emulator starts; without it,
:class:`~devtools.local_aws.client.LocalAws` and ``trainctl local-aws`` fail with one line
saying so (:class:`~devtools.local_aws.stack.EmulatorUnavailable`). It runs moto's server on
``127.0.0.1`` with the extensions in :mod:`devtools.local_aws.sagemaker` (training-plan
operations checked against botocore's service model; training jobs described as they were
sent, with a lifecycle tests drive), and creates what the deployed stack would:

* buckets for data, checkpoints and output,
* the SSM String parameter holding the seeded plans' ARNs (JSON list),
* the SageMaker execution role and the trainer's ECR repository,
* the training plans from ``--plans FILE`` (a JSON list of objects shaped like
  ``DescribeTrainingPlan``'s response, see
  :meth:`~devtools.local_aws.sagemaker.SageMakerExtension.seed_plans`).

``--env-file FILE`` receives ``export`` lines (endpoint, region, dummy
credentials, and the function's environment,
:func:`~devtools.local_aws.stack.function_environment`: what the construct sets on the
deployed function, from the same function) under which ``trainctl submit --local`` runs
against the emulator. A path that exists and is not a regular file (a symbolic link, a
folder, a FIFO, a device) is refused.

Emulator-only admin endpoints under ``/_local-aws/`` (JSON; :mod:`devtools.local_aws.app`):

=======  ===========================================  ======================================================
GET      ``/_local-aws/health``                       ``{"ok": true}``
GET      ``/_local-aws/calls[?operation=Op]``         requests seen (JSON-protocol operations with params)
DELETE   ``/_local-aws/calls``                        forget them
POST     ``/_local-aws/faults``                       ``{"operation", "code", "count"?, "message"?, "match"?}``:
                                                      answer the next ``count`` (default 1, -1 = always) calls
                                                      of ``operation`` with error ``code`` (e.g.
                                                      ``ThrottlingException``, ``ResourceLimitExceeded``,
                                                      ``InternalFailure``, ``ServiceUnavailable``); ``match``
                                                      limits it to requests whose dotted fields equal the
                                                      given values (``null``: absent)
DELETE   ``/_local-aws/faults``                       remove every fault
GET      ``/_local-aws/training-jobs``                every job's name and status
POST     ``/_local-aws/training-jobs/NAME/status``    ``{"status", "secondary_status"?, "failure_reason"?,
                                                      "final_metrics"?, "log_lines"?}``: drive the lifecycle;
                                                      log lines go to CloudWatch Logs
                                                      (``/aws/sagemaker/TrainingJobs``) and their metrics,
                                                      matched with the job's ``MetricDefinitions``, to
                                                      CloudWatch (``/aws/sagemaker/TrainingJobs``,
                                                      dimension ``TrainingJobName``) and
                                                      ``FinalMetricDataList``
POST     ``/_local-aws/training-jobs/complete-active``  mark every running job ``Completed`` (frees plans)
POST     ``/_local-aws/training-jobs/NAME/freeze``    SIGSTOP an executed job's trainer process tree: the job
                                                      hangs, ``InProgress``, until a stop (which thaws it after
                                                      the SIGTERM: :mod:`devtools.local_aws.jobs`); with
                                                      ``?rank=R`` only the worker of rank R (a stuck rank: the
                                                      others' watchdog fails the job)
POST     ``/_local-aws/objects/remove``               ``{"bucket", "key"}``: delete an S3 object outside the
                                                      authorization, as an operator who lifted a bucket
                                                      policy's Deny would (records no role may delete)
GET/PUT  ``/_local-aws/training-plans``               the plans as described now / replace the seeded plans
                                                      (and the SSM parameter)
GET/PUT  ``/_local-aws/run-jobs``                     ``{"enabled": bool, "processes"?: int}``: whether jobs
                                                      created from now on run (:mod:`devtools.local_aws.jobs`),
                                                      and the processes of each job created from now on
                                                      (``TRAINER_NPROC_PER_NODE``, ``--job-processes``)
GET/PUT  ``/_local-aws/infra-check-failures``         ``{"count": N}``: the next N jobs created with
                                                      ``InfraCheckConfig.EnableInfraCheck`` true fail their
                                                      infrastructure health check: ``Failed``
                                                      (``InfraCheckError: ...``) before the trainer starts,
                                                      no billable time (:mod:`devtools.local_aws.sagemaker`)
GET      ``/_local-aws/events[?job=NAME]``            the job state-change events emitted, each with its bus
                                                      status and its deliveries to the event targets
POST     ``/_local-aws/events/ID/redeliver``          ``{"targets"?: [...]}``: deliver event ``ID`` again
                                                      (duplicate / out-of-order delivery)
GET      ``/_local-aws/principals``                   the template's principals (name, ARN, session ARN,
                                                      access key id) and the role of each Lambda handler
GET      ``/_local-aws/grants``                       every allowed authorization: principal, operation,
                                                      action, resource and the statements that allowed it
=======  ===========================================  ======================================================

**Authorization.** Every signed request is authorized as AWS would authorize it
(:mod:`devtools.local_aws.authorize`) against the policies of the platform's synthesized template (``--template``
gives another): the env file carries the submitter function's role's keys, event targets act as the role of the
function whose handler they are, executed jobs as their ``RoleArn``, and the dummy credentials (``testing``) are the
account's administrator. A call without an Allow, or with an explicit Deny, gets the service's ``AccessDenied``.
The admin endpoints are not AWS calls and are not authorized. IAM's ``SimulatePrincipalPolicy`` is answered from the
same engine (:mod:`devtools.local_aws.simulate`).

``--run-jobs`` executes the jobs it accepts on this machine's CPU and ``--event-target
module:function`` receives every job state-change event: see :mod:`devtools.local_aws.jobs` for
what is emulated and what is not.

Python API: :class:`devtools.local_aws.client.LocalAws` starts the emulator in a child process
(so its moto state never mixes with a test's own moto mocks) and wraps the admin endpoints::

    with LocalAws(plans=[...]) as aws:
        os.environ.update(aws.env)       # or pass aws.env to submit_local()
        ...
        aws.set_job_status("my-job", "Completed", final_metrics={"train:loss": 2.1})

Modules, each importing only those below it (import-linter, ``tests/test_layers.py``):
``command`` (the ``trainctl local-aws`` command), ``client`` (:class:`LocalAws`), ``server``
(:func:`~devtools.local_aws.server.run_emulator`: checks, then moto's server), ``app`` (the WSGI
layer: admin endpoints, authorization, faults, call log), ``jobs`` (the job runner and the event bus), ``search``
(SageMaker ``Search``), ``sagemaker`` (training plans and jobs on top of moto), ``authorize`` (a request's
decision and refusal), ``operations`` (a request's caller, operation, actions and resources), ``principals`` (the
template's roles and resource policies), ``template`` (the synthesized template and its cache), ``policy`` (IAM's
policy evaluation), ``iam_reference`` (AWS's Service Authorization Reference), ``shapes`` (botocore's
service model as a checker) and ``stack`` (what the emulator stands in for, its environment, moto's
presence). Only ``app``, ``jobs``, ``search`` and ``sagemaker`` need moto; ``server`` imports them once
it starts.
"""
