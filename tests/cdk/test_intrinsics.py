"""The one CloudFormation-intrinsic renderer (``platform_constructs.intrinsics``) and its three notations' callers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_constructs import intrinsics
from platform_constructs.intrinsics import ANGLE, BASIC_FUNCTIONS, SUB, compact_json, render

pytestmark = pytest.mark.xdist_group("cdk")

ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::", {"Ref": "Bucket1"}, "/*"]]}


def test_scalars_are_written_as_json_spells_them():
    assert render("plain ${text}") == "plain ${text}"  # a string is never re-read as a template
    assert render(5) == "5" and render(2.5) == "2.5" and render(True) == "true" and render(False) == "false"


@pytest.mark.parametrize(
    ("value", "angle", "sub"),
    [
        ({"Ref": "AWS::Region"}, "<AWS::Region>", "${AWS::Region}"),
        ({"Ref": "Bucket1"}, "<Bucket1>", "${Bucket1}"),
        ({"Fn::GetAtt": ["Role1", "Arn"]}, "<Role1.Arn>", "${Role1.Arn}"),
        ({"Fn::GetAtt": "Db1.Endpoint.Address"}, "<Db1.Endpoint.Address>", "${Db1.Endpoint.Address}"),  # string form
        (ARN, "arn:<AWS::Partition>:s3:::<Bucket1>/*", "arn:${AWS::Partition}:s3:::${Bucket1}/*"),
        ({"Fn::Join": ["-", []]}, "", ""),
    ],
)
def test_references_in_either_notation(value, angle, sub):
    assert render(value) == render(value, notation=ANGLE) == angle
    assert render(value, notation=SUB) == sub


def test_sub_writes_its_variables_in_the_notation():
    template = "${AWS::AccountId}.dkr.ecr.${AWS::Region}.${AWS::URLSuffix}/repo:${Tag}"
    assert render({"Fn::Sub": template}) == "<AWS::AccountId>.dkr.ecr.<AWS::Region>.<AWS::URLSuffix>/repo:<Tag>"
    assert render({"Fn::Sub": template}, notation=SUB) == template
    # a variable map is substituted (rendered in turn); ${!Literal} is the literal ${Literal}; ${Id.Attr} is a GetAtt
    value = {"Fn::Sub": ["${Name}-${!Literal}-${Role1.Arn}", {"Name": {"Ref": "Param1"}}]}
    assert render(value) == "<Param1>-${Literal}-<Role1.Arn>"
    assert render(value, notation=SUB) == "${Param1}-${Literal}-${Role1.Arn}"


def test_select_and_split():
    assert render({"Fn::Select": [1, ["a", {"Ref": "B"}]]}) == "<B>"  # a literal list: the element itself
    assert render({"Fn::Select": ["0", ["a", "b"]]}) == "a"  # the index may be a string of digits
    split = {"Fn::Split": ["/", {"Ref": "Path"}]}
    assert render(split) == "<split <Path> on '/'>"
    assert render({"Fn::Select": [2, split]}) == "<select 2 of <split <Path> on '/'>>"


def test_get_att_knob_writes_chosen_attributes_another_way():
    def alarm_arn(logical_id: str, attribute: str) -> str | None:
        return f"arn:alarm:{logical_id}" if attribute == "Arn" and logical_id.startswith("Alarm") else None

    assert render({"Fn::GetAtt": ["Alarm1", "Arn"]}, get_att=alarm_arn) == "arn:alarm:Alarm1"
    assert render({"Fn::GetAtt": ["Alarm1", "Name"]}, get_att=alarm_arn) == "<Alarm1.Name>"
    assert render({"Fn::GetAtt": ["Topic1", "Arn"]}, get_att=alarm_arn, notation=SUB) == "${Topic1.Arn}"
    assert render({"Fn::Sub": "x ${Alarm2.Arn}"}, get_att=alarm_arn) == "x arn:alarm:Alarm2"
    assert render({"Ref": "Alarm1"}, get_att=alarm_arn) == "<Alarm1>"  # a Ref is not an attribute


@pytest.mark.parametrize(
    "value",
    [
        {"Fn::If": ["Cond", "a", "b"]},
        {"Fn::ImportValue": "Shared"},
        {"Ref": "A", "Fn::GetAtt": ["B", "Arn"]},  # two keys: not an intrinsic
        ["a", "b"],
        None,
        {"Fn::Join": ["", {"Fn::GetAZs": ""}]},  # parts that are not a list
        {"Fn::Join": "not-a-pair"},
        {"Fn::GetAtt": ["OnlyId"]},
        {"Fn::GetAtt": "NoDot"},
        {"Fn::Select": [5, ["a"]]},  # out of range
        {"Fn::Select": [True, ["a", "b"]]},
        {"Ref": ["not", "a", "name"]},
    ],
)
def test_what_it_cannot_render_raises_or_falls_back(value):
    with pytest.raises(ValueError, match=r"^cannot render .*; expected a string, a number, or one of Ref, Fn::GetAtt"):
        render(value)
    assert render(value, fallback=compact_json) == json.dumps(value, separators=(",", ":"))


def test_functions_knob_narrows_what_is_rendered_at_any_depth():
    select = {"Fn::Select": [0, ["a"]]}
    with pytest.raises(ValueError, match=r"expected a string, a number, or one of Ref, Fn::GetAtt, Fn::Join, Fn::Sub$"):
        render({"Fn::Join": ["", ["x-", select]]}, functions=BASIC_FUNCTIONS)
    assert render({"Fn::Join": ["", ["x-", select]]}, functions=BASIC_FUNCTIONS, fallback=compact_json) == (
        'x-{"Fn::Select":[0,["a"]]}'  # only the part outside the set falls back
    )


_leaf = st.one_of(st.text(max_size=8), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
_json = st.recursive(
    _leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from([*intrinsics.ALL_FUNCTIONS, "Fn::If", "Other"]), children, max_size=2),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_template_value_renders_or_raises_value_error(value):
    """Whatever a template holds (well-formed or not), the result is text or a ValueError, never another error;
    with a fallback it is always text."""
    for notation in (ANGLE, SUB):
        try:
            assert isinstance(render(value, notation=notation), str)
        except ValueError as exc:
            assert str(exc).startswith("cannot render ")
        assert isinstance(render(value, notation=notation, fallback=compact_json), str)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=6),
    st.lists(
        st.one_of(st.text(max_size=6), st.builds(lambda n: {"Ref": n}, st.text(min_size=1, max_size=6))), max_size=5
    ),
)
def test_join_is_the_join_of_its_rendered_parts(separator, parts):
    expected = separator.join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in parts)
    assert render({"Fn::Join": [separator, parts]}) == expected


def test_the_renderer_imports_nothing_of_the_cdk():
    """The CLI reads templates without a JavaScript runtime: importing the renderer loads no CDK, jsii or boto."""
    code = (
        "import sys; import platform_constructs.intrinsics; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'aws_cdk', 'jsii', 'constructs', 'cdk_nag', 'boto3', 'botocore'}); "
        "print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
