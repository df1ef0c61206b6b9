"""One field-error type, its subclasses' kept wording, the training-plan ARN rule, the capacity facts and the
model-family registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planner import PlanInputError
from platform_spec import capacity, models
from platform_spec.catalogue import (
    DEFAULT_INSTANCE_TYPE,
    TRAINABLE_INSTANCE_TYPES,
    UnknownInstanceTypeError,
    get_instance,
)
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import SPECS, HyperparameterError, coerce, parse
from platform_spec.training_plans import PlanArn, TrainingPlanArnError, foreign_reason, parse_training_plan_arn

REPO = Path(__file__).resolve().parents[2]


def test_the_field_error_message_and_attributes() -> None:
    error = FieldError("batch_size", 0, "an integer from 1 to 4096")
    assert isinstance(error, ValueError)
    assert str(error) == "batch_size: got 0; expected an integer from 1 to 4096"
    assert (error.field, error.value, error.expected, error.detail) == (
        "batch_size",
        0,
        "an integer from 1 to 4096",
        "",
    )
    detailed = FieldError("precision", "mxfp8", "one of fp8", detail="mxfp8 is not supported on H100")
    assert str(detailed) == "precision: got 'mxfp8'; expected one of fp8 (mxfp8 is not supported on H100)"
    assert detailed.reason == "got 'mxfp8'; expected one of fp8 (mxfp8 is not supported on H100)"


def test_every_field_error_type_keeps_its_attributes_and_wording() -> None:
    with pytest.raises(HyperparameterError) as hp:
        coerce("batch_size", "-8")
    assert isinstance(hp.value, FieldError)
    assert str(hp.value) == "hyperparameter 'batch_size': got '-8', expected " + SPECS["batch_size"].expected()
    plan = PlanInputError("tokens", -1, "a positive number or None", detail="a budget")
    assert isinstance(plan, FieldError) and str(plan) == "tokens: got -1, expected a positive number or None (a budget)"
    with pytest.raises(UnknownInstanceTypeError) as unknown:
        get_instance("ml.p4d.24xlarge")
    assert isinstance(unknown.value, (FieldError, KeyError))
    assert str(unknown.value) == "instance_type: got 'ml.p4d.24xlarge'; expected one of " + ", ".join(
        TRAINABLE_INSTANCE_TYPES
    )


def test_the_stack_configuration_error_is_a_field_error() -> None:
    code = (
        "from stacks.config import ConfigError\nfrom platform_spec.errors import FieldError\n"
        "e = ConfigError('trainingPlanArns[2]', 'x', 'a plan ARN')\n"
        "assert isinstance(e, FieldError) and e.key == e.field == 'trainingPlanArns[2]' and e.value == 'x'\n"
        "print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "context key 'trainingPlanArns[2]': got 'x'; expected a plan ARN"


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:s3:::bucket",  # another service's ARN
        "arn:aws:sagemaker:us-east-1:12345678901:training-plan/p",  # 11-digit account
        "arn:aws:sagemaker:us-east-1:123456789012:training-plan/-p",  # name starts with a hyphen
        "arn:aws:sagemaker:us-east-1:123456789012:training-plan/" + "p" * 65,  # name too long
        " arn:aws:sagemaker:us-east-1:123456789012:training-plan/p",  # leading space
        None,
    ],
)
def test_a_training_plan_arn_from_elsewhere_is_a_field_error(arn: object) -> None:
    with pytest.raises(TrainingPlanArnError) as refused:
        PlanArn.parse(arn, field="trainingPlanArns[1]")
    error = refused.value
    assert isinstance(error, FieldError) and (error.field, error.value) == ("trainingPlanArns[1]", arn)
    # the message leaves the field to the caller, who names where the ARN came from
    assert (
        str(error)
        == f"got {arn!r}; expected a SageMaker training-plan ARN arn:aws[-partition]:sagemaker:<region>:<12-digit account>:training-plan/<name>"
    )
    with pytest.raises(ValueError):
        parse_training_plan_arn(arn)


def test_a_plan_of_another_partition_region_or_account_is_foreign() -> None:
    gov = "arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:training-plan/p"
    assert PlanArn.parse(gov).partition == "aws-us-gov"
    assert "region us-gov-west-1 (not us-east-1)" in foreign_reason(gov, region="us-east-1", account="123456789012")
    assert foreign_reason(gov, region=None, account=None) is None  # nothing known: nothing compared


def test_the_capacity_facts_and_their_source() -> None:
    assert capacity.CAPACITY_BLOCK_RECLAIM_S == 30 * 60
    assert capacity.PENDING_LIMIT_S == 2 * 24 * 3600
    assert capacity.CAPACITY_BLOCK_ENV == "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
    assert "training-plan-utilization-for-training-jobs.html" in capacity.__doc__


def test_the_default_instance_type_is_trainable() -> None:
    assert DEFAULT_INSTANCE_TYPE == "ml.p6-b200.48xlarge" and DEFAULT_INSTANCE_TYPE in TRAINABLE_INSTANCE_TYPES


def test_the_model_registry_refuses_unknown_names_and_clashing_families(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(models.UnknownModelError) as unknown:
        models.get_preset("gpt-2t")
    assert isinstance(unknown.value, FieldError) and isinstance(unknown.value, KeyError)
    assert unknown.value.field == "model" and "gpt-1b" in unknown.value.expected
    with pytest.raises(models.UnknownModelError, match="model_family: got 'mamba'"):
        models.get_family("mamba")

    gpt = models.get_family("gpt")
    monkeypatch.setattr(models, "_FAMILIES", dict(models._FAMILIES))  # a scratch registry for this test
    assert models.register_family(gpt) is gpt  # the same record again (a re-import): no change
    with pytest.raises(ValueError, match="model family 'gpt' is registered twice"):
        models.register_family(models.ModelFamily("gpt", gpt.shape_type, {}, gpt.flops_per_token))
    with pytest.raises(ValueError, match=r"presets \['gpt-1b'\] belong to family 'gpt'"):
        models.register_family(
            models.ModelFamily("other", gpt.shape_type, {"gpt-1b": gpt.presets["gpt-1b"]}, gpt.flops_per_token)
        )
    other = models.ModelFamily("other", gpt.shape_type, {"other-1b": gpt.presets["gpt-1b"]}, gpt.flops_per_token)
    models.register_family(other)
    assert models.family_names() == ("gpt", "llama", "other") and models.family_of("other-1b") is other


def test_the_registry_finds_the_families_on_its_first_lookup() -> None:
    """Nothing but platform_spec imported: the first lookup imports ``model_families``, which registers them."""
    code = (
        "import sys\nimport platform_spec.models as m\n"
        "assert 'model_families' not in sys.modules\n"
        "print(m.family_names(), 'model_families' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('gpt', 'llama') True"


def test_a_lookup_during_the_families_own_import_fails_loudly(tmp_path: Path) -> None:
    """Edge: a family module that looks the registry up while ``model_families`` is still registering would
    see no family (and, e.g., an empty list of model presets); the registry refuses instead."""
    package = tmp_path / "cyclic_families"
    package.mkdir()
    (package / "__init__.py").write_text("from platform_spec import models\nmodels.preset_names()\n")
    code = (
        "import platform_spec.models as m\nm.FAMILIES_PACKAGE = 'cyclic_families'\n"
        "try:\n    m.preset_names()\nexcept RuntimeError as exc:\n    print('refused:', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: no model family is registered after importing 'cyclic_families'")


def test_a_refusal_states_its_bounds_exactly() -> None:
    """Bounds are written as declared (``:g`` rounded 1048576 to ``1.04858e+06``), and so is the learning rate
    that bounds ``min_learning_rate``."""
    with pytest.raises(HyperparameterError) as error:
        coerce("seq_length", "4")
    assert error.value.expected == "an integer >= 8 and <= 1048576"
    assert SPECS["max_steps"].expected() == "an integer >= 1 and <= 1000000000"
    assert SPECS["adam_beta1"].expected() == "a number >= 0 and <= 0.999999"
    with pytest.raises(HyperparameterError, match=r"<= learning_rate \(0\.000123456789\)"):
        parse({"learning_rate": "0.000123456789", "min_learning_rate": "0.0002"})
