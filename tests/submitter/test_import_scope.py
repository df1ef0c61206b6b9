"""What the submitter's function imports for each action: its cold start is the callers' latency (issue 17).

Not timed (``benchmarks/startup.py`` measures the imports): each test runs the deployed handler in a fresh
interpreter against the embedded AWS and pins which modules were loaded after each answer. The job API's
actions and the reader never load a submission's modules (request parsing, capacity, the job's parameters,
the planner); the first submission does, and answers as before.
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
    f"{RUNTIME}.idempotency",
)
"""Modules only a submission needs."""

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
    answers = []
    for name, event in json.loads(sys.argv[1]):
        answers.append(handler.lambda_handler(event, Context()))
        loaded[name] = sorted(sys.modules)
    print(json.dumps({{"answers": answers, "loaded": loaded}}, default=str), file=sys.stderr)
    """
)


def _run(env: dict[str, str], events: list[tuple[str, dict]], **extra_env: str) -> dict:
    """Answers and the modules loaded after the import and after each named event, in a fresh interpreter."""
    process_env = {**os.environ, **env, **extra_env, "AWS_LAMBDA_FUNCTION_NAME": "job-submitter"}
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


def test_the_job_api_answers_without_the_submission_modules_and_a_submission_loads_them(env, make_request):
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
    loaded = result["loaded"]
    for step in ("import", "describe", "describe run", "list", "list_runs", "stop"):
        assert _submission_modules(loaded[step]) == [], step
    assert _submission_modules(loaded["submit"]) == list(SUBMISSION_ONLY)


def test_the_reader_never_loads_the_submission_modules_even_when_asked_to_submit(env, make_request):
    from platform_constructs.submitter.runtime import settings

    events = [
        ("describe", {"action": "describe", "job_name": "no-such-job-import-scope"}),
        ("submit", make_request(capacity="on-demand")),
        ("stop", {"action": "stop", "job_name": "no-such-job-import-scope"}),
    ]
    result = _run(env, events, **{settings.ENV_ALLOWED_ACTIONS: ",".join(settings.READ_ACTIONS)})
    codes = [answer["error"]["code"] for answer in result["answers"]]
    assert codes == ["NotFound", "ActionNotAllowed", "ActionNotAllowed"]
    for step, modules in result["loaded"].items():
        assert _submission_modules(modules) == [], step
