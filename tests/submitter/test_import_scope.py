"""What the submitter's function imports, and when: its cold start is the callers' latency (issue 17).

Not timed (``benchmarks/startup.py`` measures the imports): each test runs the deployed handler in a fresh
interpreter against the embedded AWS and pins which modules were loaded after the import (Lambda's init phase)
and after each answer. A function that answers submissions imports a submission's modules (request parsing,
capacity, the job's parameters, the planner) at init, where an on-demand function has a full vCPU; the reader,
which answers none, never loads them. One refusal loads request parsing, for its wording: a bad ``job_name``
(never the submission itself: the service, capacity, the job, the planner).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.xdist_group("submitter")

RUNTIME = "platform_constructs.submitter.runtime"
SUBMISSION_ONLY = (
    "planner",
    "model_families",
    "platform_spec.hyperparameters",
    "platform_spec.models",
    f"{RUNTIME}.service",
    f"{RUNTIME}.request",
    f"{RUNTIME}.capacity",
    f"{RUNTIME}.job",
)
"""Modules only a submission needs."""
REQUEST_WORDING = ("model_families", "platform_spec.hyperparameters", "platform_spec.models", f"{RUNTIME}.request")
"""What a bad ``job_name``'s refusal may load: request parsing (its message's wording) and the facts it reads."""
SUBMISSION_ITSELF = tuple(m for m in SUBMISSION_ONLY if m not in REQUEST_WORDING)
"""What even that refusal never loads: the service, capacity, the job's parameters, the planner."""

RUN = textwrap.dedent(
    f"""
    import json, sys
    from {RUNTIME} import handler

    class Context:
        function_name = "job-submitter"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:job-submitter"
        aws_request_id = "9b1e8c1e-0000-4000-8000-000000000002"

        def get_remaining_time_in_millis(self):
            return 60_000

    loaded = {{"import": sorted(sys.modules)}}
    preloaded = handler.SUBMISSIONS_PRELOADED
    prepared = handler.DEPENDENCIES_PREPARED
    answers = []
    for name, event in json.loads(sys.argv[1]):
        try:
            answers.append(handler.lambda_handler(event, Context()))
        except Exception as exc:  # a function error, as Lambda reports it
            answers.append({{"raised": type(exc).__name__}})
        loaded[name] = sorted(sys.modules)
    print(json.dumps({{"answers": answers, "loaded": loaded, "preloaded": preloaded, "prepared": prepared}}, default=str), file=sys.stderr)
    """
)


def _run(env: dict[str, str], events: list[tuple[str, dict]], *, drop: tuple[str, ...] = (), **extra_env: str) -> dict:
    """Answers and the modules loaded after the import and after each named event, in a fresh interpreter with
    the function's environment (plus ``extra_env``, less the variables in ``drop``)."""
    process_env = {**os.environ, **env, **extra_env, "AWS_LAMBDA_FUNCTION_NAME": "job-submitter"}
    for name in drop:
        process_env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(events)],
        env=process_env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stderr.strip().splitlines()[-1])


def _submission_modules(modules: list[str]) -> list[str]:
    return [m for m in SUBMISSION_ONLY if any(n == m or n.startswith(m + ".") for n in modules)]


def test_a_function_that_answers_submissions_imports_their_modules_at_init_and_answers_every_action(env, make_request):
    events = [
        ("describe", {"action": "describe", "job_name": "no-such-job-import-scope"}),
        ("describe run", {"action": "describe", "run_id": "no-such-run-import-scope"}),
        ("list", {"action": "list", "max_results": 1}),
        ("list_runs", {"action": "list_runs"}),
        ("stop", {"action": "stop", "job_name": "no-such-job-import-scope"}),
        ("bad job name", {"action": "describe", "job_name": "not a job name"}),
        ("submit", make_request(capacity="on-demand", dry_run=True)),
    ]
    result = _run(env, events)
    answers = dict(zip([name for name, _ in events], result["answers"], strict=True))
    assert answers["describe"]["error"]["code"] == "NotFound"
    assert answers["describe run"]["error"]["code"] == "NotFound"
    assert answers["list"]["status"] == "listed" and isinstance(answers["list"]["jobs"], list)
    assert answers["list_runs"]["status"] == "listed" and isinstance(answers["list_runs"]["runs"], list)
    assert answers["stop"]["error"]["code"] == "NotFound"
    assert (answers["bad job name"]["error"]["code"], answers["bad job name"]["error"]["field"]) == (
        "InvalidRequest",
        "job_name",
    )
    from platform_constructs.submitter.runtime.request import job_name_expected

    assert job_name_expected() in answers["bad job name"]["error"]["message"]
    assert answers["submit"]["status"] == "validated", answers["submit"]
    assert answers["submit"]["estimate"]["fits"] is True
    assert result["preloaded"] is True and result["prepared"] is True  # clients and configuration made at init
    assert _submission_modules(result["loaded"]["import"]) == list(SUBMISSION_ONLY)


def test_the_reader_never_loads_the_submission_modules_even_when_asked_to_submit(env, make_request):
    from platform_constructs.submitter.runtime import settings
    from platform_constructs.submitter.runtime.actions import READ_ACTIONS

    events = [
        ("describe", {"action": "describe", "job_name": "no-such-job-import-scope"}),
        ("submit", make_request(capacity="on-demand")),
        ("stop", {"action": "stop", "job_name": "no-such-job-import-scope"}),
        ("bad job name", {"action": "describe", "job_name": "not a job name"}),
    ]
    result = _run(env, events, **{settings.ENV_ALLOWED_ACTIONS: ",".join(READ_ACTIONS)})
    assert result["preloaded"] is False and result["prepared"] is True
    codes = [answer["error"]["code"] for answer in result["answers"]]
    assert codes == ["NotFound", "ActionNotAllowed", "ActionNotAllowed", "InvalidRequest"]
    loaded = result["loaded"]
    for step in ("import", "describe", "submit", "stop"):
        assert _submission_modules(loaded[step]) == [], step
    assert not set(_submission_modules(loaded["bad job name"])) & set(SUBMISSION_ITSELF)  # request's wording only


@pytest.mark.parametrize(
    ("allowed", "preloaded"),
    [
        (None, True),  # absent: every action
        ("submit", True),
        ("describe,submit", True),
        ("describe,list,list_runs", False),  # the reader
        ("describe,stop", False),
        ("describe,delete", False),  # malformed: nothing at init; the first request reports it
        ("", False),
    ],
)
def test_the_modules_are_preloaded_exactly_when_the_function_answers_submissions(runtime, allowed, preloaded):
    environ = {} if allowed is None else {runtime.settings.ENV_ALLOWED_ACTIONS: allowed}
    assert runtime.handler.preload_submissions(environ) is preloaded
    if allowed in ("describe,delete", ""):
        with pytest.raises(runtime.errors.ConfigurationError):
            runtime.actions.allowed_actions_from_environ(environ)


def test_outside_lambda_nothing_is_made_at_import(env):
    result = _run(env, [], drop=("AWS_LAMBDA_FUNCTION_NAME",))
    assert result["prepared"] is False  # tests and trainctl make the clients on first use


def test_a_function_missing_a_setting_starts_and_its_requests_fail_as_function_errors(env):
    from platform_constructs.submitter.runtime import settings

    events = [("describe", {"action": "describe", "job_name": "no-such-job-import-scope"})] * 2
    result = _run(env, events, drop=(settings.ENV_TRAINER_IMAGE_URIS,))
    assert result["prepared"] is False  # the init phase does not fail on it
    assert result["answers"] == [{"raised": "ConfigurationError"}] * 2  # each request reports it, as before


NO_NETWORK = textwrap.dedent(
    f"""
    import json, socket, sys
    connects = []

    def refuse(self, address):
        connects.append(repr(address))
        raise OSError("this test reaches no network")

    socket.socket.connect = refuse
    from {RUNTIME} import handler

    class Context:
        function_name = "job-submitter"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:job-submitter"
        aws_request_id = "9b1e8c1e-0000-4000-8000-000000000003"

        def get_remaining_time_in_millis(self):
            return 60_000

    result = {{"prepared": handler.DEPENDENCIES_PREPARED, "import connects": list(connects)}}
    try:
        handler.lambda_handler({{"action": "describe", "job_name": "no-such-job-import-scope"}}, Context())
    except Exception as exc:  # a function error, as Lambda reports it
        result["first request"] = type(exc).__name__
    print(json.dumps(result), file=sys.stderr)
    """
)
"""Import the handler with every socket connect refused and recorded, then answer one request."""


def test_an_environment_that_names_a_function_without_its_keys_reaches_no_network_at_import(env, tmp_path):
    # Lambda puts the role's keys in the environment; a shell or CI job that only sets AWS_LAMBDA_FUNCTION_NAME
    # would otherwise have botocore's credential chain ask the instance metadata service (169.254.169.254) when
    # the import made the clients. The first request makes them, and fails, as it did before clients were made
    # at init.
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE")
    process_env = {k: v for k, v in {**os.environ, **env}.items() if k not in keys}
    process_env.update(
        AWS_LAMBDA_FUNCTION_NAME="job-submitter",
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
    )
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], env=process_env, capture_output=True, text=True, check=True
    )
    result = json.loads(out.stderr.strip().splitlines()[-1])
    assert result == {"prepared": False, "import connects": [], "first request": "NoCredentialsError"}


def test_a_failure_at_init_is_tried_again_by_the_first_request(runtime, env, monkeypatch):
    made: list[str] = []
    create = runtime.aws.Clients.create

    def flaky(**kwargs):  # the first attempt, at init, fails as a transient fault would
        made.append("attempt")
        if len(made) == 1:
            raise ConnectionError("transient")
        return create(environ=env)

    monkeypatch.setattr(runtime.aws.Clients, "create", flaky)
    monkeypatch.setattr(runtime.handler, "_dependencies", None)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert runtime.handler.prepare_dependencies({**env, runtime.handler.LAMBDA_FUNCTION_ENV: "job-submitter"}) is False
    clients, config = runtime.handler.dependencies()  # what the first request calls
    assert made == ["attempt", "attempt"]
    assert config == runtime.config.SubmitterConfig.from_environ(env)
    assert clients.sagemaker.meta.endpoint_url == env["AWS_ENDPOINT_URL"]
