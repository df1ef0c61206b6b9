"""One table per request field: parsing, the unknown-field check, the fingerprint, the JSON Schema and
the README's request table all come from the request's table (``runtime/request.py``). No emulator needed."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jsonschema
import pytest
from botocore.validate import ParamValidator

from devtools.local_aws.shapes import operation_model
from platform_constructs.submitter.runtime import request as request_module
from platform_constructs.submitter.runtime import request_schema
from platform_constructs.submitter.runtime.fields import Check, Field, OnlyWith, check_table, names
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import HyperparameterError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

REPO = Path(__file__).resolve().parents[2]
BASE = {"inputs": {"train": "x/"}}
GOLDEN_REQUEST = {  # test_request.py's: the guide's default request and its stored v2 fingerprint
    "instance_type": "ml.p6-b200.48xlarge",
    "capacity": "training-plan",
    "hyperparameters": {"model": "gpt-1b", "precision": "mxfp8", "num_layers": 10, "batch_size": 8, "seq_length": 2048},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 24,
    "tags": {"team": "research"},
}
GOLDEN_FINGERPRINT = "5f641bd5a14e08d05b78b27d7392165de02aec7afd178d6448f505b51c7e30e9"

PENDING = Field(
    "max_pending_seconds", "integer",
    help="seconds a job may wait for its training plan's capacity",
    sagemaker="StoppingCondition.MaxPendingTimeInSeconds",
    only_with=OnlyWith("capacity", ("training-plan", "auto")),
)  # fmt: skip
"""A field as it would be added: one row (its limits bound by name from botocore's model)."""
PRIORITY = Field("priority", "number", help="a made-up unbounded number", minimum=0, schema={"examples": [0.5]})
"""A row without a rule, with an open range (so only the finiteness guard refuses inf and NaN), and a
JSON-Schema fragment of its own."""


def _refusal(runtime, config, event):
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request(event, config)
    assert refused.value.code == "InvalidRequest"
    return refused.value


def _readme_region(text: str) -> str:
    begin, end = request_schema.README_BEGIN, request_schema.README_END
    return text.split(begin, 1)[1].split(end, 1)[0]


# --- adding a field is one row --------------------------------------------------------------------------


def test_a_row_added_to_the_table_is_parsed_checked_fingerprinted_and_documented(runtime, local_config, monkeypatch):
    parse, event = runtime.request.parse_request, {**BASE, "max_pending_seconds": 3600}
    # before: the unknown-field check refuses it
    refusal = _refusal(runtime, local_config, event)
    assert refusal.field == "max_pending_seconds" and "a known request field" in refusal.message
    assert "max_pending_seconds" not in runtime.request_schema.request_json_schema()["properties"]

    monkeypatch.setattr(runtime.request, "FIELDS", (*runtime.request.FIELDS, PENDING, PRIORITY))

    # parsing: the value (an integral number as an integer), readable like any field; absent -> its default
    request = parse({**event, "max_pending_seconds": 3600.0}, local_config)
    assert request.value("max_pending_seconds") == 3600 and isinstance(request.value("max_pending_seconds"), int)
    assert {name: request.extras[name] for name in ("max_pending_seconds", "priority")} == {
        "max_pending_seconds": 3600,
        "priority": None,
    }
    assert parse(BASE, local_config).value("max_pending_seconds") is None
    # the limits are the model's (MaxPendingTimeInSeconds: min 1800, max 2419200 = 28 days); botocore's own
    # validation checks only the minimum, SageMaker the maximum
    shape = operation_model("sagemaker", "CreateTrainingJob").input_shape.members["StoppingCondition"]
    assert shape.members["MaxPendingTimeInSeconds"].metadata == {"min": 1800, "max": 2419200}
    for seconds in (1799, 1800, 2419200, 2419201):
        try:
            assert parse({**BASE, "max_pending_seconds": seconds}, local_config).value("max_pending_seconds") == seconds
            accepted = True
        except runtime.errors.Refusal as refused:
            assert (refused.field, refused.message) == (
                "max_pending_seconds",
                f"max_pending_seconds: got {seconds}, expected an integer from 1800 to 2419200",
            )
            accepted = False
        assert accepted is (1800 <= seconds <= 2419200), seconds
        if accepted:
            report = ParamValidator().validate({"MaxRuntimeInSeconds": 3600, "MaxPendingTimeInSeconds": seconds}, shape)
            assert not report.has_errors(), report.generate_report()
    for bad, expected in [
        ("1h", "an integer from 1800"),
        (True, "an integer from 1800"),
        (1800.5, "an integer from 1800"),
    ]:
        refusal = _refusal(runtime, local_config, {**BASE, "max_pending_seconds": bad})
        assert refusal.field == "max_pending_seconds" and expected in refusal.message
    # its cross-field rule, declared in the row
    refusal = _refusal(runtime, local_config, {**event, "capacity": "spot"})
    assert (
        refusal.field == "max_pending_seconds"
        and "no value with capacity 'spot' (training-plan or auto only)" in refusal.message
    )
    for bad in (math.inf, math.nan, -1):
        assert _refusal(runtime, local_config, {**BASE, "priority": bad}).field == "priority"

    # the fingerprint: part of the job when sent; a request that does not send it keeps its stored hash
    assert request.sent["max_pending_seconds"] == 3600
    assert parse(GOLDEN_REQUEST, local_config).fingerprint() == GOLDEN_FINGERPRINT
    assert parse({**GOLDEN_REQUEST, "max_pending_seconds": None}, local_config).fingerprint() == GOLDEN_FINGERPRINT
    assert parse({**GOLDEN_REQUEST, "max_pending_seconds": 3600}, local_config).fingerprint() != GOLDEN_FINGERPRINT

    # the unknown-field check lists it; the JSON Schema and the README table carry it
    assert "max_pending_seconds, priority)" in _refusal(runtime, local_config, {**BASE, "nope": 1}).message
    schema = runtime.request_schema.request_json_schema()
    assert schema["properties"]["max_pending_seconds"] == {
        "type": "integer", "minimum": 1800, "maximum": 2419200, "description": PENDING.help,
    }  # fmt: skip
    assert schema["properties"]["priority"] == {
        "type": "number",
        "minimum": 0,
        "examples": [0.5],
        "description": PRIORITY.help,
    }
    assert schema["dependentSchemas"]["max_pending_seconds"] == {
        "properties": {"capacity": {"enum": ["training-plan", "auto"]}}
    }
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors({**event})) == []
    assert list(validator.iter_errors({**event, "max_pending_seconds": 1799}))
    assert list(validator.iter_errors({**event, "capacity": "spot"}))
    row = [
        line
        for line in runtime.request_schema.readme_table().splitlines()
        if line.startswith("| `max_pending_seconds` |")
    ]
    assert row == [
        "| `max_pending_seconds` | - | seconds a job may wait for its training plan's capacity | an integer from 1800 to "
        "2419200; only with `capacity` `training-plan` or `auto` |"
    ]


def test_every_attribute_of_the_request_is_a_row(runtime):
    rq = runtime.request
    attributes = {f.name for f in dataclasses.fields(rq.SubmitRequest)} - {"extras", "sent"}
    assert attributes <= set(names(rq.FIELDS)), "a SubmitRequest attribute no row fills"
    assert all(row.type != "object" or row.parse is not None for row in rq.FIELDS)


def c(values, config):
    """A cross-field check for the malformed tables below."""


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((Field("a", "string", help=""), Field("a", "string", help="")), "request field 'a': the name appears twice"),
        ((Field("Bad-Name", "string", help=""),), "expected a snake_case name"),
        ((Field("a", "integer", help="", default="1"),), "default '1' is not a JSON integer"),
        ((Field("a", "boolean", help="", default=0),), "default 0 is not a JSON boolean"),
        ((Field("a", "object", help=""),), "an object field needs a rule that parses it"),
        ((Field("a", "string", help="", minimum=1),), "a range or unit needs type integer or number"),
        ((Field("a", "integer", help="", choices=("x",)),), "choices need type string"),
        ((Field("a", "string", help="", only_with=OnlyWith("b", ("x",))), Field("b", "string", help="")),
         "only_with names 'b', which is not an earlier field"),
        ((Field("b", "string", help="", choices=("x", "y")), Field("a", "string", help="", only_with=OnlyWith("b", ("z",)))),
         "only_with values ['z'] are not choices of 'b'"),
        ((Field("a", "string", help="", checks=(Check(c, needs=("missing",)),)),), "check 'c' needs unknown fields ['missing']"),
    ],
)  # fmt: skip
def test_a_malformed_table_is_refused_naming_the_row(rows, message):
    with pytest.raises(ValueError, match="request field") as refused:
        check_table(rows)
    assert message in str(refused.value)
    check_table(request_module.FIELDS)  # the real one is well formed


# --- the generic rules of the table, held for every row ---------------------------------------------------


@pytest.mark.parametrize("name", names(request_module.FIELDS))
def test_null_is_absent_for_every_field(runtime, local_config, name):
    parse = runtime.request.parse_request
    base = {"hyperparameters": {"synthetic_data": True}} if name == "inputs" else BASE  # no train channel then
    with_null, without = parse({**base, name: None}, local_config), parse(base, local_config)
    assert with_null == without and with_null.sent == without.sent


@pytest.mark.parametrize("row", request_module.FIELDS, ids=lambda row: row.name)
def test_an_empty_string_is_absent_only_where_the_row_says_so(runtime, local_config, row):
    parse = runtime.request.parse_request
    if row.blank_is_absent:
        assert parse({**BASE, row.name: ""}, local_config) == parse(BASE, local_config)
    else:
        assert _refusal(runtime, local_config, {**BASE, row.name: ""}).field == row.name


def test_the_fingerprint_hashes_exactly_the_rows_marked_fingerprint_that_were_sent(runtime, local_config):
    everything = {
        "action": "submit",
        "job_name": "run-1", "client_token": "tok-1", "instance_type": "ml.p6-b200.48xlarge", "instance_count": 2,
        "capacity": "auto", "training_plan_arn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p",
        "hyperparameters": {"batch_size": 4}, "inputs": {"train": "x/"}, "max_runtime_hours": 2, "max_wait_hours": 3,
        "max_retry_attempts": 1, "tags": {"team": "a"}, "auto_tune": False, "dry_run": True,
        "accept_memory_risk": True, "network_isolation": True, "inter_container_encryption": False,
        "infra_check": False,
        "model_config": json.loads((FIXTURES / "llama3_8b_config.json").read_text()),
        "mlflow": {"resource_arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/t"},
        "tensorboard": {},
    }  # fmt: skip
    # run names its own jobs (job_name and client_token are refused with it), and stall_minutes is run's: sent on
    # their own below
    with_run = {"run", "stall_minutes"}
    assert set(everything) | with_run == set(names(request_module.FIELDS))
    sent = runtime.request.parse_request(everything, local_config).sent
    assert set(sent) | with_run == {row.name for row in request_module.FIELDS if row.fingerprint}
    run = {k: v for k, v in everything.items() if k not in ("job_name", "client_token")}
    run = {**run, "run": {"run_id": "r1", "max_segments": 2}, "stall_minutes": 20}
    run_sent = runtime.request.parse_request(run, local_config).sent
    assert run_sent["run"] == {"run_id": "r1", "max_segments": 2} and set(run_sent) == set(sent) | with_run
    assert not {"action", "job_name", "client_token", "dry_run", "accept_memory_risk"} & set(sent)
    # a model_config is hashed as the shape it maps to, not as the file's text
    assert sent["model_config"]["num_kv_heads"] == "8" and "architectures" not in sent["model_config"]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e-4, 10**400])
def test_durations_that_are_not_a_positive_whole_second_or_not_finite_are_refused(runtime, local_config, value):
    """NaN compares false with every bound, 1e-4 hours rounds to 0 seconds, 10**400 overflows a float."""
    refusal = _refusal(runtime, local_config, {**BASE, "max_runtime_hours": value})
    assert refusal.field == "max_runtime_hours" and refusal.message.endswith(
        "expected a number of hours > 0 and <= 672"
    )


@pytest.mark.parametrize(
    ("name", "value"), [("instance_count", 10**400), ("instance_count", -(10**400)), ("max_retry_attempts", 10**400)]
)
def test_integers_beyond_a_floats_range_are_refused_not_raised(runtime, local_config, name, value):
    """Found by the schema/parser property: math.isfinite(10**400) raises OverflowError."""
    refusal = _refusal(runtime, local_config, {**BASE, name: value})
    assert refusal.field == name and "expected an integer from 1 to" in refusal.message


def test_fields_are_checked_in_the_tables_order_and_a_check_runs_once_its_fields_are_parsed(runtime, local_config):
    derived = runtime.request.derived_job_name("someone-else")
    # instance_count comes before tags
    assert (
        _refusal(runtime, local_config, {**BASE, "tags": {"aws:x": "v"}, "instance_count": 0}).field == "instance_count"
    )
    # job_name's reserved-name check needs client_token, the next row: it runs before instance_count's
    refusal = _refusal(
        runtime, local_config, {**BASE, "job_name": derived, "client_token": "mine", "instance_count": 0}
    )
    assert refusal.field == "job_name" and "this request's client_token derives" in refusal.message
    # a bad client_token is refused before that check (which needs it)
    assert _refusal(runtime, local_config, {**BASE, "job_name": derived, "client_token": "a b"}).field == "client_token"
    # inputs.train needs hyperparameters (synthetic data needs no train channel)
    assert runtime.request.parse_request({"hyperparameters": {"synthetic_data": True}}, local_config).inputs == {}


def test_eval_interval_needs_a_validation_channel_of_the_data(runtime, local_config):
    evaluating = {**BASE, "hyperparameters": {"eval_interval": 100}}
    refusal = _refusal(runtime, local_config, evaluating)
    assert refusal.field == "inputs.validation" and "eval_interval=100 evaluates on it" in refusal.message
    given = {**evaluating, "inputs": {"train": "x/", "validation": "y/"}}
    assert set(runtime.request.parse_request(given, local_config).inputs) == {"train", "validation"}
    synthetic = {"hyperparameters": {"eval_interval": 100, "synthetic_data": True}}  # synthetic validation tokens
    assert runtime.request.parse_request(synthetic, local_config).inputs == {}
    assert runtime.request.parse_request(BASE, local_config).hyperparameters.eval_interval == 0  # off by default


def test_the_schema_and_the_parser_agree_on_fields_accepted_only_with_a_capacity(runtime, local_config):
    validator = jsonschema.Draft202012Validator(runtime.request_schema.request_json_schema())
    plan = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p"
    cases = [
        ({"max_wait_hours": 30}, False),  # capacity absent is training-plan: no spot wait
        ({"capacity": "spot", "max_wait_hours": 30}, True),
        ({"capacity": "on-demand", "max_wait_hours": 30}, False),
        ({"training_plan_arn": plan}, True),  # capacity absent is training-plan
        ({"capacity": "auto", "training_plan_arn": plan}, True),
        ({"capacity": "spot", "training_plan_arn": plan}, False),
    ]
    for fields, accepted in cases:
        event = {**BASE, **fields}
        assert validator.is_valid(event) is accepted, fields
        try:
            runtime.request.parse_request(event, local_config)
            parsed = True
        except runtime.errors.Refusal as refusal:
            assert refusal.field in fields and "only)" in refusal.message
            parsed = False
        assert parsed is accepted, fields


# --- the refusal builder takes the one field-error type ------------------------------------------------


def test_invalid_request_is_built_from_a_field_error(runtime):
    invalid, Refusal = runtime.errors.invalid, runtime.errors.Refusal
    refusal = invalid(FieldError("instance_count", 0, "an integer from 1 to 256"))
    assert isinstance(refusal, Refusal) and (refusal.code, refusal.field) == ("InvalidRequest", "instance_count")
    assert refusal.message == "instance_count: got 0, expected an integer from 1 to 256"
    detailed = invalid(FieldError("hyperparameters.precision", "mxfp8", "one of bf16, fp8", detail="H100 has no MXFP8"))
    assert detailed.message == "hyperparameters.precision: got 'mxfp8', expected one of bf16, fp8 (H100 has no MXFP8)"
    whole = invalid(FieldError("", "list", "a JSON object with the request fields"), details={"k": 1})
    assert whole.field is None and whole.message == "got 'list', expected a JSON object with the request fields"
    assert whole.to_response()["error"] == {"code": "InvalidRequest", "message": whole.message, "details": {"k": 1}}
    long = invalid(FieldError("job_name", "x" * 500, "at most 63"))
    assert len(long.message) < 200 and "..." in long.message
    # the trainer's own errors are field errors too
    assert invalid(HyperparameterError("batch_size", 0, "an integer >= 1")).field == "batch_size"


# --- the README table is generated ---------------------------------------------------------------------


def test_the_readme_holds_exactly_the_generated_request_table(runtime):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(request_schema.README_BEGIN) == readme.count(request_schema.README_END) == 1
    assert _readme_region(readme) == "\n" + runtime.request_schema.readme_table(), (
        "README.md's request table is stale: run python -m platform_constructs.submitter.runtime.request_schema --readme"
    )
    assert runtime.request_schema.main(["--readme", str(REPO / "README.md"), "--check"]) == 0


def test_regenerating_the_readme_replaces_only_the_table_and_refuses_a_readme_without_markers(
    runtime, tmp_path, capsys
):
    main, table = runtime.request_schema.main, runtime.request_schema.readme_table()
    begin, end = request_schema.README_BEGIN, request_schema.README_END
    readme = tmp_path / "README.md"
    stale = f"# Title\n\nbefore\n{begin}\n| old | table |\n{end}\nafter: `{end[:4]}` and more\n"
    readme.write_text(stale, encoding="utf-8")
    assert main(["--readme", str(readme), "--check"]) == 1 and readme.read_text(encoding="utf-8") == stale
    assert main(["--readme", str(readme)]) == 0
    assert (
        readme.read_text(encoding="utf-8") == f"# Title\n\nbefore\n{begin}\n{table}{end}\nafter: `{end[:4]}` and more\n"
    )
    written = readme.read_text(encoding="utf-8")
    assert main(["--readme", str(readme)]) == 0 and readme.read_text(encoding="utf-8") == written  # idempotent
    assert main(["--readme", str(readme), "--check"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]  # no temporary file left behind
    for broken in ("no markers\n", f"{begin}\n{begin}\n{end}\n", f"{end}\n{begin}\n", f"{begin}\ncut short"):
        readme.write_text(broken, encoding="utf-8")
        assert main(["--readme", str(readme)]) == 2
        assert readme.read_text(encoding="utf-8") == broken  # nothing half-done
    assert "expected one '<!-- request-fields:begin -->' line before one" in capsys.readouterr().err
    assert main(["--readme", str(tmp_path / "missing.md")]) == 2


def test_the_schema_command_prints_the_generated_schema(runtime, capsys):
    assert runtime.request_schema.main(["--schema"]) == 0
    assert json.loads(capsys.readouterr().out) == runtime.request_schema.request_json_schema()
