"""Registry queries that replaced precision names written in code (the fp8_scaling values, the TE runs of a
format, the baseline a quantized format's loss is compared with)."""

from __future__ import annotations

from platform_spec import hyperparameters
from platform_spec.precisions import PRECISIONS, SCALED_PRECISIONS, SCALINGS, get_precision, recipe_scalings


def test_the_scaling_choice_is_the_formats_with_several_recipes() -> None:
    assert SCALED_PRECISIONS == ("fp8",) and SCALINGS == ("current", "delayed")
    assert hyperparameters.FP8_SCALINGS == SCALINGS
    assert hyperparameters.Hyperparameters().fp8_scaling == SCALINGS[0]  # the default is the first recipe
    assert hyperparameters.SPECS["fp8_scaling"].choices == SCALINGS


def test_each_te_recipe_runs_once() -> None:
    runs = [(p.name, s) for p in PRECISIONS for s in recipe_scalings(p)]
    assert runs == [("fp8", "current"), ("fp8", "delayed"), ("mxfp8", "current"), ("nvfp4", "current")]
    for p in PRECISIONS:
        recipes = [get_precision(p.name).te_recipe(s) for s in recipe_scalings(p)]
        assert [r.class_name for r in recipes if r] == [r.class_name for r in p.te_recipes.values()]  # each once
    assert recipe_scalings(get_precision("bf16")) == ()
    assert {p.high_precision for p in PRECISIONS if p.uses_te} == {"bf16"}  # the GPU check's loss baseline
