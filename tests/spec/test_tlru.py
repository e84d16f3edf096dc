"""tlru's config refused in the spec, per expanded profile, before any server starts (SGLang refuses it too)."""

from __future__ import annotations

import pytest

from harness.errors import SpecError
from harness.spec import parse_spec
from harness.spec.tlru import check_tlru, flag_value
from tests.helpers.specs import shared_prefix, spec


def tlru_spec(thresholds: list[int], estimates: list[int]) -> dict:
    cfg = '{"threshold": {threshold}, "next_prompt_estimate": {estimate}}'
    server = {
        "name": "tlru-{threshold}-{estimate}",
        "launch": "sim",
        "args": ["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", cfg],
    }
    matrix = {"threshold": thresholds, "estimate": estimates}
    return spec("t", shared_prefix(), servers=[server], matrix=matrix)


def test_a_sweep_over_threshold_and_estimate_expands() -> None:
    profiles = parse_spec(tlru_spec([256, 512], [64, 128]), "t.yaml").server_profiles()
    assert [p.name for p in profiles] == ["tlru-256-64", "tlru-256-128", "tlru-512-64", "tlru-512-128"]


def test_threshold_not_above_estimate_is_refused_naming_the_profile() -> None:
    s = parse_spec(tlru_spec([256, 512], [64, 256]), "t.yaml")
    with pytest.raises(SpecError) as e:
        s.server_profiles()
    assert str(e.value) == (
        "t.yaml: servers[0].args: tlru needs threshold > next_prompt_estimate (SGLang refuses it), "
        "got threshold 256 <= next_prompt_estimate 256"
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--radix-eviction-policy", "tlru"], "got threshold 0 <= next_prompt_estimate 0"),
        (["--radix-eviction-policy=tlru", "--radix-eviction-policy-config", "{bad"], "is not JSON"),
        (["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", "[1]"], "a JSON object"),
        (
            ["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", '{"threshold": -1}'],
            "threshold expected a non-negative integer, got -1",
        ),
    ],
)
def test_bad_tlru_configs(args: list[str], words: str) -> None:
    with pytest.raises(SpecError) as e:
        check_tlru(args, "t.yaml", "servers[0]")
    assert words in str(e.value) and str(e.value).startswith("t.yaml: servers[0].args: ")


def test_other_policies_and_good_configs_pass() -> None:
    check_tlru(["--radix-eviction-policy", "lru"], "t.yaml", "k")
    check_tlru(["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", '{"threshold": 2, "next_prompt_estimate": 1}'], "f", "k")  # fmt: skip
    assert flag_value(["--a", "1", "--a=2"], "--a") == "2" and flag_value([], "--a") is None
