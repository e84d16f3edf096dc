"""A profile's `replicas:`, `router:` and `storage:` keys: what they expand to, the gateway's command line,
each worker's GPUs, and one line naming file and key for every bad value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError, SpecError
from harness.servers.replica_launch import gpu_split, router_argv, worker_profile
from harness.spec import load_spec
from tests.helpers import specs

SERVER = {
    "name": "{policy}",
    "launch": "sglang",
    "replicas": 2,
    "router": {"policy": "{policy}", "cache_threshold": 0.5, "disable_retries": True, "dp_aware": False},
    "args": ["--max-total-tokens", "3000"],
}


def _profiles(tmp_path: Path, server: dict[str, Any], matrix: dict[str, Any] | None = None) -> list[Any]:
    raw = specs.spec("rep", specs.shared_prefix(), tokenizer="word", servers=[server])
    if matrix is not None:
        raw["matrix"] = matrix
    return load_spec(specs.write_yaml(tmp_path / "rep.yaml", raw)).server_profiles()


def test_a_matrix_of_policies_fills_the_router_and_the_gateway_line(tmp_path):
    profs = _profiles(tmp_path, SERVER, {"policy": ["round_robin", "cache_aware"]})
    assert [(p.name, p.replicas, p.router.policy, p.storage) for p in profs] == [
        ("round_robin", 2, "round_robin", "own"),
        ("cache_aware", 2, "cache_aware", "own"),
    ]
    argv = router_argv(profs[1], ["http://127.0.0.1:1", "http://127.0.0.1:2"], 3, 4, binary="smg")
    assert argv[:3] == ["smg", "launch", "--host"] and argv[3] == profs[1].host
    assert argv[argv.index("--worker-urls") + 1 : argv.index("--worker-urls") + 3] == [
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
    ]
    assert argv[argv.index("--prometheus-port") + 1] == "4"
    assert argv[-5:] == ["--policy", "cache_aware", "--cache-threshold", "0.5", "--disable-retries"]
    assert "--dp-aware" not in argv  # false leaves a flag off
    w1 = worker_profile(profs[1], 1, "2,3")
    assert w1.name == "cache_aware/w1" and w1.replicas is None and w1.router is None
    assert w1.env["CUDA_VISIBLE_DEVICES"] == "2,3" and w1.args == profs[1].args


def test_a_router_alone_means_one_worker_and_replicas_can_be_swept(tmp_path):
    one = _profiles(tmp_path, {"name": "g", "launch": "sim", "router": {"policy": "round_robin"}})
    assert one[0].replicas == 1 and one[0].router.policy == "round_robin"
    swept = _profiles(tmp_path, {"name": "r{n}", "launch": "sim", "replicas": "{n}"}, {"n": [2, 4]})
    assert [(p.name, p.replicas, p.router.policy) for p in swept] == [
        ("r2", 2, "cache_aware"),  # smg's own default policy
        ("r4", 4, "cache_aware"),
    ]
    plain = _profiles(tmp_path, {"name": "p", "launch": "sim"})
    assert plain[0].replicas is None and plain[0].router is None


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        (
            {"launch": "attach", "url": "http://127.0.0.1:1", "args": None},
            "servers[0].replicas",
            "not for launch: attach",
        ),
        ({"replicas": None, "router": None, "storage": "shared"}, "servers[0].storage", "only with replicas"),
        ({"storage": "everyone"}, "servers[0].storage", "expected one of own, shared"),
        ({"replicas": 0}, "servers[0].replicas", "expected 1 to 64 workers, got 0"),
        ({"replicas": True}, "servers[0].replicas", "expected a whole number"),
        ({"replicas": "two"}, "servers[0].replicas", "expected a whole number of workers, got 'two'"),
        ({"router": {"policy": "fastest"}}, "servers[0].router.policy", "got 'fastest'"),
        ({"router": ["cache_aware"]}, "servers[0].router", "expected a mapping"),
        ({"router": {"port": 9}}, "servers[0].router.port", "chosen at run time"),
        ({"router": {"prometheus_port": 9}}, "servers[0].router.prometheus_port", "would share 29000"),
        ({"router": {"worker-urls": "x"}}, "servers[0].router.worker-urls", "the profile's replicas"),
        ({"router": {"Bad Flag": 1}}, "servers[0].router.Bad Flag", "expected an smg flag name"),
        ({"router": {"cache_threshold": [1]}}, "servers[0].router.cache_threshold", "expected a string"),
    ],
)
def test_bad_replicas_keys_name_file_key_and_value(tmp_path, change, key, words):
    server = copy.deepcopy(SERVER) | {"name": "s", "router": {"policy": "round_robin"}}
    for k, v in change.items():
        if v is None:
            server.pop(k, None)
        else:
            server[k] = v
    with pytest.raises(SpecError) as e:
        _profiles(tmp_path, server)
    assert key in str(e.value) and words in str(e.value) and "rep.yaml" in str(e.value)


def test_a_filled_placeholder_is_checked_too(tmp_path):
    server = SERVER | {"name": "{policy}"}
    with pytest.raises(SpecError, match=r"router\.policy.*got 'sticky'"):
        _profiles(tmp_path, server, {"policy": ["round_robin", "sticky"]})


def test_each_worker_gets_its_slice_of_the_visible_gpus_or_the_profile_is_refused(tmp_path):
    four = _profiles(tmp_path, SERVER | {"name": "s", "replicas": 2, "args": ["--tp", "2"], "router": {}})[0]
    assert gpu_split(four, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert gpu_split(four, None) == [None, None]  # the sim, a CPU run: nothing to split
    with pytest.raises(
        HarnessError, match=r"server s: replicas 2 x tensor parallel 2 needs 4 GPUs; 3 visible"
    ):
        gpu_split(four, ["0", "1", "2"])
