"""The router-policy and engine registries (harness.spec.router_policies, harness.spec.engines) are the
only lists: the spec check, the routing what-if, advise, the help and the adapters all follow them."""

from __future__ import annotations

import pytest

from harness.engines import ADAPTERS, RESET_PATHS
from harness.errors import SpecError
from harness.servers.kind import SERVER_KINDS, SGLANG_FLAG_KINDS, choose_kind
from harness.spec.engines import ENGINES, LAUNCH_KINDS, default_engine, default_ready_timeout_s
from harness.spec.router_policies import ADVISED_POLICIES, ROUTER_POLICIES
from harness.spec.servers import parse_servers
from harness.whatif.routing import POLICIES, RouterConfig, make_router


def _group(policy: str) -> list:
    raw = [{"name": "g", "launch": "sim", "replicas": 2, "router": {"policy": policy}}]
    return parse_servers(raw, None, "s.yaml")


def test_every_registered_policy_is_accepted_by_the_spec_and_replayed_by_the_whatif() -> None:
    assert POLICIES == ROUTER_POLICIES and set(ADVISED_POLICIES) <= set(ROUTER_POLICIES)
    for policy in ROUTER_POLICIES:
        (prof,) = _group(policy)
        assert prof.router is not None and prof.router.policy == policy
        router = make_router(3, RouterConfig(policy=policy))
        assert router.n == 3
    with pytest.raises(SpecError, match=r"router.policy.*cache_aware, prefix_hash.*got 'nope'"):
        _group("nope")


def test_the_whatif_help_lists_the_registry() -> None:
    from harness.commands.whatif import build_parser

    text = " ".join(build_parser("harness whatif").format_help().split())
    assert ", ".join(ROUTER_POLICIES).replace(" ", "") in text.replace(" ", "")


def test_every_engine_has_an_adapter_and_a_launch_runs_its_own() -> None:
    assert set(ADAPTERS) == set(ENGINES)
    assert LAUNCH_KINDS[:3] == ("sglang", "sim", "vllm") and LAUNCH_KINDS[-2:] == ("command", "attach")
    defaults = {"sglang": 900.0, "sim": 60.0, "vllm": 900.0, "command": 300.0, "attach": 30.0}
    assert {k: default_ready_timeout_s(k) for k in defaults} == defaults
    assert [default_engine(k) for k in defaults] == ["sglang", "sim", "vllm", "generic", "sglang"]
    assert RESET_PATHS[:2] == ("/flush_cache", "/reset_prefix_cache?reset_external=true")
    assert SERVER_KINDS[:5] == ("auto", "sglang", "sglang-cpu", "sim", "vllm")
    assert set(SERVER_KINDS) == {"auto", "sglang-cpu", *(e for e in ENGINES if ENGINES[e].launch)}
    assert choose_kind("sim") == ("sim", "asked for with --server-kind sim")
    assert choose_kind("vllm")[1].endswith("(SGLang flags in `launch: sglang` profiles are dropped)")
    assert SGLANG_FLAG_KINDS == (
        "auto",
        "sglang",
        "sglang-cpu",
        "sim",
    )  # a fleet group's (harness.fleet.config)


@pytest.mark.parametrize("engine", ["sglang", "sim", "vllm"])
def test_an_engines_model_flags_are_refused_in_args(engine: str) -> None:
    for flag in ENGINES[engine].model_flags:
        with pytest.raises(SpecError, match=f"{flag} is not allowed here"):
            parse_servers([{"name": "a", "launch": engine, "args": [flag, "m"]}], None, "s.yaml")
