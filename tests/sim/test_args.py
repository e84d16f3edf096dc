"""serve-sim's arguments: SGLang names, SGLang flags it does not model, and startup errors."""

from __future__ import annotations

import pytest

from harness.sim.args import build_parser
from tests.helpers.cli import harness


def parse(*argv: str):
    return build_parser("serve-sim").parse_args(list(argv))


def test_sglang_defaults():
    ns = parse()
    assert (ns.host, ns.port, ns.page_size, ns.radix_eviction_policy) == ("127.0.0.1", 30000, 1, "lru")
    # 0.5.23 leaves --hicache-ratio unset: 2.0, shrunk to fit 80 % of host memory, unless given
    assert (ns.hicache_ratio, ns.hicache_write_policy, ns.decode_log_interval) == (None, "write_through", 40)
    assert not ns.enable_hierarchical_cache and not ns.enable_metrics and not ns.enable_cache_report
    assert ns.fault_crash_after is None and ns.fault_http_500 == 0.0


def test_enable_hicache_alias():
    assert parse("--enable-hicache").enable_hierarchical_cache


def test_unknown_sglang_flag_warns(capsys):
    ns = parse("--tp-size", "2", "--mem-fraction-static=0.8", "--disable-cuda-graph", "--port", "1234")
    assert ns.port == 1234
    assert ns.ignored_sglang_args == ["--tp-size", "--disable-cuda-graph"]
    assert ns.mem_fraction_static == 0.8
    assert "--tp-size" in capsys.readouterr().err


def test_unknown_other_flag_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse("--no-such-flag", "3")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--no-such-flag" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "policy,config,needle",
    [
        ("slru", '{"protected_thresold": 3}', "unknown key 'protected_thresold'"),
        (
            "tlru",
            '{"threshold": 100, "next_prompt_estimate": 512}',
            "must be greater than next_prompt_estimate",
        ),
        ("tlru", '{"threshold": 100}', "needs next_prompt_estimate"),
        ("lru", "{not json", "invalid JSON"),
    ],
)
def test_bad_policy_config_fails_at_startup(policy, config, needle):
    r = harness("serve-sim", "--port", "0", "--radix-eviction-policy", policy,
                "--radix-eviction-policy-config", config, timeout=30)  # fmt: skip
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_good_policy_config():
    assert parse(
        "--radix-eviction-policy", "slru", "--radix-eviction-policy-config", '{"protected_threshold": 4}'
    ).policy_config == {"protected_threshold": 4}
