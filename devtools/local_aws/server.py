"""The emulator's process: :func:`run_emulator` checks what it was given, then :func:`serve` runs moto's
server with the emulator's extensions (``trainctl local-aws``; :class:`~devtools.local_aws.client.LocalAws`
starts it in a child process).

Importable without moto: moto, werkzeug and the modules that need them are imported once it starts.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from devtools.local_aws.principals import Network, resolver
from devtools.local_aws.stack import (
    DEFAULT_REGION,
    DUMMY_CREDENTIALS,
    MOTO_MISSING,
    READY_MARKER,
    EmulatorUnavailable,
    StackResources,
    env_file_problem,
    require_moto,
    submitter_environment,
    write_env_file,
)

PROG = "trainctl local-aws"
SUBMITTER_HANDLER = "platform_constructs.submitter.runtime.handler.lambda_handler"
"""The submitter function's handler: the env file stands for that function (its environment and role)."""


class ListenError(OSError):
    """The emulator cannot listen on the address it was given (port in use, not an address of this machine)."""


def load_plans(path: str | os.PathLike[str] | None) -> list[Any]:
    """The JSON list of plans in ``path`` (``None``: no plans).

    Raises:
        ValueError: the file is not a JSON list.
    """
    if path is None:
        return []
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of objects shaped like DescribeTrainingPlan's response")
    return data


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    plans: list[Any] | None = None,
    region: str = DEFAULT_REGION,
    env_file: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
    run_jobs: bool = False,
    event_targets: Sequence[str] = (),
    state_dir: str | os.PathLike[str] | None = None,
    job_processes: int | None = None,
    event_retry_delays: Sequence[float] | None = None,
    template: str | os.PathLike[str] | None = None,
    context: Mapping[str, Any] | None = None,
    fsx_root: str | os.PathLike[str] | None = None,
) -> int:
    """Run the emulator in the foreground until ``stop`` is set (or SIGINT / SIGTERM).

    Prints one line ``LOCAL_AWS_READY {json}`` on stdout once the stack is
    created (``endpoint``, ``region``, ``env``, ``resources``,
    ``training_plan_arns``, ``state_dir``), and a human summary on stderr.

    Args:
        run_jobs: execute the training jobs it accepts (:mod:`devtools.local_aws.jobs`); off, a job
            stays as created and tests drive it (``POST /_local-aws/training-jobs/NAME/status``).
        event_targets: ``module:function`` targets of every job state-change event, imported once
            listening, after the process's environment was set to the submitter's
            (:func:`~devtools.local_aws.stack.submitter_environment`: they run like the deployed functions).
        state_dir: where executed jobs' ``/opt/ml`` folders go (default: a temporary folder,
            removed when the emulator stops).
        job_processes: ``TRAINER_NPROC_PER_NODE`` of executed jobs (default
            :data:`devtools.local_aws.jobs.JOB_PROCESSES`).
        event_retry_delays: seconds before each retry of an event target that raised (default
            :data:`devtools.local_aws.jobs.TARGET_RETRY_DELAYS_S`; tests shorten them).
        template: the CloudFormation template whose policies are enforced (default: the platform's, synthesized
            once and cached, :func:`devtools.local_aws.template.platform_template`).
        context: CDK context over ``cdk.json``'s that the platform's template is synthesized with (e.g.
            ``{"vpc": "create"}``; an existing VPC's ``{"vpc": {"vpcId", "subnetIds", "availabilityZones"}}`` is
            also read with ``template``). VPC mode, when the template has subnets or ``vpc`` names a VPC: the
            network and the FSx file system are made in moto (:mod:`devtools.local_aws.network`) and the
            submitter's environment carries their IDs.
        fsx_root: the folder that plays the FSx for Lustre file system's root: a job's ``FileSystemDataSource``
            ``/<mount name>/<path>`` reads ``fsx_root/<path>`` (:mod:`devtools.local_aws.jobs`).

    Every request is authorized (:mod:`devtools.local_aws.authorize`). The environment (``env`` of the ready line,
    ``env_file``) carries the submitter function's role's credentials; event targets run with the credentials of
    the role of the template's function whose handler they are (a handler not in the template: a principal with no
    policies), so targets of different roles cannot share the process.

    Raises:
        EmulatorUnavailable: moto (the extra ``local``) is not installed.
        ListenError: it cannot listen on ``host:port`` (in use, not an address of this machine).
        OSError: ``env_file`` cannot be written.
        devtools.local_aws.jobs.TargetError: an event target cannot be imported.
    """
    require_moto()
    os.environ.update(DUMMY_CREDENTIALS)  # moto maps these to its default account
    try:  # moto and its server's dependencies are the extra `local`, imported only here
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server, select_address_family

        from devtools.local_aws import processing, sagemaker, search
        from devtools.local_aws.app import EmulatorApp
        from devtools.local_aws.authorize import Authorizer
        from devtools.local_aws.jobs import JOB_PROCESSES, EventBus, JobRunner, load_target
        from devtools.local_aws.principals import authorities
        from devtools.local_aws.template import load_template, platform_template
    except ImportError as exc:
        raise EmulatorUnavailable(f"{MOTO_MISSING} ({exc})") from None

    sagemaker.install()
    processing.install()
    search.install()
    if quiet:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    context = dict(context or {})
    resources = StackResources(image_architectures=_image_architectures(context))
    synthesized = load_template(template) if template is not None else platform_template(region, context=context)
    network, vpc_environment = _network(synthesized, context, region, resources)
    found = authorities(synthesized, region=region, resources=resources, network=network)
    submitter = found.principal_for_handler(SUBMITTER_HANDLER)
    target_keys = {found.principal_for_handler(spec).access_key for spec in event_targets}
    if len(target_keys) > 1:
        raise ValueError(
            f"event targets {', '.join(event_targets)}: their functions have different roles; they run in one process "
            "with one set of credentials, so give the emulator targets of one role"
        )
    app = EmulatorApp(
        DomainDispatcherApplication(create_backend_app),
        extension=sagemaker.EXTENSION,
        region=region,
        resources=resources,
        authorizer=Authorizer(found, plan_capacity=sagemaker.EXTENSION.capacity_arns),
    )
    # bind here: werkzeug's make_server prints and exits the process when it cannot bind
    try:
        listener = socket.create_server((host, port), family=select_address_family(host, port))
    except (OSError, OverflowError) as exc:  # OverflowError: a port outside 0-65535
        reason = (getattr(exc, "strerror", None) or str(exc)).split(" (while attempting to bind")[0]
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    with listener:
        server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler, fd=listener.fileno())
    app.endpoint = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="local-aws", daemon=True)
    thread.start()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    state = Path(tempfile.mkdtemp(prefix="local-aws-state-") if state_dir is None else state_dir)
    try:
        arns = app.create_stack(plans or [])
        env = submitter_environment(app.endpoint, region, resources, submitter.access_key, vpc_environment)
        if event_targets:  # the targets run like the deployed functions, with their environment and role
            os.environ.update({**env, "AWS_ACCESS_KEY_ID": target_keys.pop()})
        targets = [(spec, load_target(spec)) for spec in event_targets]
        app.events = sagemaker.EXTENSION.events = EventBus(
            lambda entries: app.client("events").put_events(Entries=entries),
            targets,
            retry_delays=event_retry_delays,
            region=region,
        )
        state.mkdir(parents=True, exist_ok=True)
        app.runner = sagemaker.EXTENSION.runner = JobRunner(
            app.client,
            sagemaker.EXTENSION,
            state,
            enabled=run_jobs,
            processes=job_processes or JOB_PROCESSES,
            authorizer=app.authorizer,
            fsx_root=None if fsx_root is None else Path(fsx_root),
        )
        processing.RUNNER = processing.ProcessingRunner(app.client, state)
        if env_file:
            write_env_file(env_file, env)
        _announce(app.endpoint, region, env, resources, arns, state, env_file)
        stop.wait()
    finally:
        if app.runner is not None:
            app.runner.shutdown()  # no job process outlives the emulator
        server.shutdown()
        thread.join(timeout=10)
        if app.events is not None:
            app.events.close()
        sagemaker.EXTENSION.runner = sagemaker.EXTENSION.events = None
        if state_dir is None:
            shutil.rmtree(state, ignore_errors=True)
    return 0


def _image_architectures(context: Mapping[str, Any]) -> tuple[str, ...]:
    """The emulated deployment's ``imageArchitectures`` (its CDK context's, checked as the stack checks it;
    cdk.json's default where the context names none)."""
    from stacks.config import parse_image_architectures
    from stacks.platform_app import cdk_json_context

    return parse_image_architectures(context.get("imageArchitectures", cdk_json_context().get("imageArchitectures")))


def _network(
    template: Mapping[str, Any], context: Mapping[str, Any], region: str, resources: StackResources
) -> tuple[Network | None, dict[str, Any]]:
    """VPC mode's twins of the template's network in moto and the submitter's VPC arguments
    (:func:`devtools.local_aws.network.environment_of`); ``(None, {})`` outside VPC mode, which imports nothing
    more (moto's EC2 and FSx models take a while to import)."""
    vpc_mode = context.get("vpc") is not None or any(
        r.get("Type") == "AWS::EC2::Subnet" for r in template.get("Resources", {}).values()
    )
    if not vpc_mode:
        return None, {}
    from devtools.local_aws.network import create_twins, environment_of

    twins = create_twins(template, context, region=region)
    network = Network(twins.refs, twins.attrs)
    resolve = resolver(template, region=region, resources=resources, network=network)
    return network, environment_of(template, SUBMITTER_HANDLER, resolve)


def _announce(
    endpoint: str,
    region: str,
    env: Mapping[str, str],
    resources: StackResources,
    arns: list[str],
    state: Path,
    env_file: str | os.PathLike[str] | None,
) -> None:
    """The ready line on stdout (:data:`~devtools.local_aws.stack.READY_MARKER` and JSON) and a summary on stderr."""
    info = {
        "endpoint": endpoint,
        "region": region,
        "env": env,
        "resources": asdict(resources),
        "training_plan_arns": arns,
        "state_dir": str(state),
    }
    print(READY_MARKER + json.dumps(info), flush=True)
    print(
        f"local-aws (an AWS emulator: moto + training plans) listening on {endpoint}, region {region}\n"
        f"  {len(arns)} training plan(s) seeded; SSM parameter {resources.plan_arns_parameter}\n"
        + (
            f"  environment written to {env_file} (source it, then `trainctl submit --local REQUEST.json`)\n"
            if env_file
            else ""
        )
        + "  stop with Ctrl-C",
        file=sys.stderr,
        flush=True,
    )


def run_emulator(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    plans_file: str | os.PathLike[str] | None = None,
    region: str = DEFAULT_REGION,
    env_file: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    run_jobs: bool = False,
    event_targets: Sequence[str] = (),
    state_dir: str | os.PathLike[str] | None = None,
    job_processes: int | None = None,
    event_retry_delays: Sequence[float] | None = None,
    template: str | os.PathLike[str] | None = None,
    context: Mapping[str, Any] | None = None,
    fsx_root: str | os.PathLike[str] | None = None,
) -> int:
    """``trainctl local-aws``: :func:`serve` in the foreground, every failure one line on stderr.

    The checks come first, in this order, so that nothing is created or left listening when one fails:
    moto installed (the extra ``local``), ``plans_file`` readable and a JSON list, ``env_file`` a regular
    file or nothing (not a folder, symbolic link, FIFO or device) in a folder that can be created, each
    event target ``module:function`` with a module that can be found (imported once listening),
    ``job_processes`` positive, ``context`` a JSON object, ``fsx_root`` an existing folder.

    Args:
        host, port, region, quiet, run_jobs, event_targets, state_dir, job_processes, event_retry_delays, template,
            context, fsx_root: as :func:`serve`
            (``port`` 0: any free port).
        plans_file: a JSON list of plans shaped like ``DescribeTrainingPlan``'s response (``None``: none).
        env_file: where to write the ``export`` lines once listening (its folder is created).

    Returns:
        0 once stopped (SIGINT / SIGTERM); 2 after one line ``trainctl local-aws: <why>`` on stderr when
        moto is missing, a plan or ``plans_file`` is malformed, ``host:port`` cannot be listened on,
        ``env_file`` cannot be written, or ``context`` is invalid (``stacks.config.ConfigError``'s message).
    """
    try:
        require_moto()  # first: nothing else matters without it
    except EmulatorUnavailable as exc:
        return _fail(str(exc))
    try:
        plans = load_plans(plans_file)
    except (OSError, ValueError) as exc:
        return _fail(f"--plans {plans_file}: {exc}")
    if env_file is not None and (problem := _env_file_problem(env_file)):  # "" too: not "no env file"
        return _fail(f"--env-file {os.fspath(env_file) or repr('')}: {problem}")
    for spec in event_targets:
        problem = _target_problem(spec)
        if problem:
            return _fail(f"--event-target {spec!r}: {problem}")
    if job_processes is not None and (isinstance(job_processes, bool) or job_processes < 1):
        return _fail(f"--job-processes {job_processes}: expected a positive integer")
    if context is not None and not isinstance(context, Mapping):
        return _fail(f"--context: got {type(context).__name__}; expected a JSON object of CDK context keys")
    if fsx_root is not None and (context or {}).get("fsxLustre") is None:
        return _fail(
            f"--fsx-root {os.fspath(fsx_root)}: the platform has no file system to play; expected --context with "
            """fsxLustre, e.g. '{"vpc": "create", "fsxLustre": {}}'"""
        )
    if fsx_root is not None and not Path(fsx_root).is_dir():
        return _fail(f"--fsx-root {os.fspath(fsx_root)}: not a folder; expected the folder that plays the file system")
    try:
        return serve(
            host=host,
            port=port,
            plans=plans,
            region=region,
            env_file=env_file,
            quiet=quiet,
            run_jobs=run_jobs,
            event_targets=event_targets,
            state_dir=state_dir,
            job_processes=job_processes,
            event_retry_delays=event_retry_delays,
            template=template,
            context=context,
            fsx_root=fsx_root,
        )
    # moto found but not importable (a dependency of its server missing); a plan that does not fit
    # DescribeTrainingPlan's shape, an event target's import; a port in use, not an address of this machine
    except (EmulatorUnavailable, ValueError, ListenError) as exc:
        return _fail(str(exc))
    except OSError as exc:  # the env file (the only other file it writes)
        return _fail(f"--env-file {env_file}: cannot write it: {exc}")


def _env_file_problem(env_file: str | os.PathLike[str]) -> str | None:
    """Why the env file cannot be written, found before listening: :func:`env_file_problem`, else its folder
    cannot be created (it is created now)."""
    target = Path(env_file)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return str(exc)
    return env_file_problem(env_file)  # not target: Path("") is "."


def _target_problem(spec: str) -> str | None:
    """Why ``spec`` cannot be an event target, found without importing its module; None if it may be."""
    module, sep, function = spec.partition(":")
    if not sep or not module or not function:
        return "expected module:function (e.g. package.module:lambda_handler)"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as exc:
        return f"cannot find module {module}: {exc}"
    return None if found else f"no module named {module}"


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2
