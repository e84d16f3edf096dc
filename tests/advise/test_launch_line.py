"""Launch lines: every configuration advise names as SGLang 0.5.23's command in tokens (pool, memory lever,
policy config with SGLang's own keys, HiCache, storage and its variables), smg 1.13.0's line in front of
replicas; every line advise can emit parsed by SGLang's own argument parser (its cached CPU venv) and every
smg line by smg's own."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.advise.better import TIE_POINTS, preferred
from harness.advise.grid import HOST_RATIOS, Candidate
from harness.advise.launch_line import (
    FP8_KV,
    STORAGE_ENV,
    LaunchLine,
    fleet_launch,
    model_path,
    sglang_line,
    smg_line,
    worker_urls,
)
from harness.advise.levers import Levers
from harness.advise.node import Machine, resolve
from harness.advise.physics import Modelled
from harness.advise.recommend import recommend
from harness.advise.working_set import WorkingSet
from harness.errors import HarnessError
from harness.sim.hicache import WRITE_POLICIES
from harness.sim.timing import resolve_profile
from harness.whatif.grid import Config
from harness.whatif.replay import Result

REPO = Path(__file__).resolve().parents[2]
H100 = resolve_profile("h100", "llama-3.1-8b-instruct")
BLOCKS = Levers(H100, 512, "blocks")
TOKENS = Levers(H100, 1, "tokens")


def _flag(line: LaunchLine, name: str) -> str:
    return line.argv[line.argv.index(name) + 1]


def test_tlru_config_is_in_tokens_with_sglangs_keys_and_threshold_above_the_estimate() -> None:
    cfg = Config("tlru", 808, policy_config=(("next_prompt_estimate", 13), ("threshold", 54)))
    line = sglang_line(cfg, BLOCKS, "llama-3.1-8b-instruct")
    pc = json.loads(_flag(line, "--radix-eviction-policy-config"))
    assert pc == {"next_prompt_estimate": 13 * 512, "threshold": 54 * 512}
    assert pc["threshold"] > pc["next_prompt_estimate"]
    assert _flag(line, "--max-total-tokens") == str(808 * 512)  # the pool in tokens, not blocks
    assert _flag(line, "--model-path") == "meta-llama/Llama-3.1-8B-Instruct"
    assert line.argv[:3] == ("python", "-m", "sglang.launch_server")


def test_each_memory_lever_becomes_its_flags() -> None:
    default = BLOCKS.profile.default_pool_tokens // 512
    plain = sglang_line(Config("lru", default), BLOCKS, None)
    assert "--mem-fraction-static" not in plain.argv and "--kv-cache-dtype" not in plain.argv
    lever = BLOCKS.pool_lever(default + 40)
    assert lever is not None and lever.kind == "fraction"
    grown = sglang_line(Config("lru", default + 40), BLOCKS, None)
    assert _flag(grown, "--mem-fraction-static") == f"{lever.fraction:.3f}"
    fp8 = sglang_line(Config("lru", 2 * default), BLOCKS, None)
    assert _flag(fp8, "--kv-cache-dtype") == FP8_KV and _flag(fp8, "--max-total-tokens") == str(
        2 * default * 512
    )


def test_host_tier_and_storage_carry_their_flags_and_variables() -> None:
    cfg = Config("lru", 808, 4.0, "write_back", storage="file")
    line = sglang_line(cfg, BLOCKS, "Qwen3-8B", port=30001, gpus="1", storage_dir="/mnt/l3")
    assert "--enable-hierarchical-cache" in line.argv and _flag(line, "--hicache-ratio") == "4"
    assert _flag(line, "--hicache-write-policy") == "write_back"
    assert _flag(line, "--hicache-storage-backend") == "file" and _flag(line, "--port") == "30001"
    assert dict(line.env) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/mnt/l3",
    }
    assert line.line().startswith(
        "CUDA_VISIBLE_DEVICES=1 SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR=/mnt/l3 python"
    )
    mc = sglang_line(Config("lru", 808, 2.0, "write_through", storage="mooncake"), BLOCKS, None)
    assert {k for k, _ in mc.env} >= {"MOONCAKE_MASTER", "MOONCAKE_TE_META_DATA_SERVER"}
    assert line.to_dict()["argv"] == list(line.argv) and line.to_dict()["line"] == line.line()
    assert model_path("QWEN3-0.6B") == "Qwen/Qwen3-0.6B"  # model names are case-insensitive


def test_fleet_lines_put_each_replica_on_its_gpu_and_port_and_smg_in_front() -> None:
    d = fleet_launch(4, Config("lru", 808), "cache_aware", False, BLOCKS, None, per_node=2)
    assert d["nodes"] == 2 and len(d["workers"]) == 2
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in d["workers"]] == ["0", "1"]
    assert d["router"]["argv"][:2] == ["smg", "launch"] and "cache_aware" in d["router"]["argv"]
    assert worker_urls(4, 2) == [
        "http://node-0:30001",
        "http://node-0:30002",
        "http://node-1:30001",
        "http://node-1:30002",
    ]


def test_the_node_is_shared_by_its_replicas_and_bounded_by_its_gpus() -> None:
    node = resolve(H100, 256.0, 2, None, None)
    assert node.per_node == 2 and node.share_gb == 128.0 and "all replicas on one node" in node.sentence()
    assert resolve(H100, 256.0, 4, 2, None).share_gb == 128.0
    alone = resolve(H100, 512.0, 1, 2, None)  # no --replicas: the one advised shares the node with another
    assert alone.per_node == 2 and alone.share_gb == 256.0
    assert resolve(H100, 256.0, 16, None, None).per_node == 8  # 8 GPUs a node bound the replicas
    with pytest.raises(HarnessError, match="--replicas-per-node: 4 replicas need a GPU each"):
        resolve(H100, 256.0, 4, 4, 2)
    typical = resolve(H100, None, 1, None, None)
    assert typical.host_memory_gb == 256.0 and "typical host" in typical.source
    here = resolve(H100, None, 1, None, None, Machine(8, "NVIDIA H100 80GB HBM3", 2015.6))
    assert here.host_memory_gb == 2015.6 and "this machine" in here.source and here.gpus == 8


def _cand(policy: str, pool: int, hit: float, ttft: float, ratio: float = 0.0, write: str = "write_through"):
    cfg = Config(policy, pool, ratio, write)
    res = Result(cfg, 10, 10_000, int(hit * 10_000), int(hit * 10_000), 0, 10_000, 0, 0, 0, 0.0)
    return Candidate(cfg, res, Modelled({"mean": ttft, "p50": ttft, "p99": ttft}, 1.0, 10.0, None, None), 512)


def test_within_half_a_point_the_candidate_that_changes_less_is_named() -> None:
    base = _cand("lru", 808, 0.044, 967.0)
    fp8 = _cand("lfu", 1616, 0.058, 953.0)  # needs FP8 KV
    host = _cand("lfu", 808, 0.058 - TIE_POINTS / 2, 953.2, ratio=2.0)
    wb = _cand("lru", 808, 0.0585, 950.0, ratio=2.0, write="write_back")
    assert preferred([fp8, host, wb], base, BLOCKS) is host
    far = _cand("lfu", 1616, 0.058 + 2 * TIE_POINTS, 953.0)
    assert preferred([far, host], base, BLOCKS) is far  # more than half a point ahead: it is named


def test_two_levers_that_pay_only_together_are_one_step() -> None:
    ws = WorkingSet(1, {"1m": 500, "5m": 3346, "15m": 500}, 500, 1000, {"p90": 800}, 0.1, 0.1, 10, 0)
    cands = [
        _cand("lru", 808, 0.044, 967.0),
        _cand("lru", 808, 0.050, 961.9, ratio=2.0),
        _cand("lfu", 808, 0.046, 965.0),
        _cand("lfu", 808, 0.058, 953.2, ratio=2.0),
        _cand("lfu", 1616, 0.058, 953.0),
    ]
    r = recommend(cands, 808, ws, "blocks", levers=BLOCKS, host_memory_gb=128.0)
    assert r.chosen.config == Config("lfu", 808, 2.0, "write_through") and r.hicache
    assert r.steps[-1].action.startswith("together: HiCache host tier 2x") and r.better is None
    assert "no step pays on its own" not in " ".join(r.notes)


def _every_config() -> list[tuple[Config, Levers]]:
    """Every shape of configuration advise replays: each policy (tlru at the grid's two settings and at its
    smallest), each memory lever, each host ratio and write policy, each storage backend, on a block trace
    and on a token input."""
    tlru = [
        (("next_prompt_estimate", 0), ("threshold", 2)),
        (("next_prompt_estimate", 13), ("threshold", 54)),
        (("next_prompt_estimate", 1024), ("threshold", 4096)),
    ]
    policies: list[tuple[str, tuple]] = [("lru", ()), ("lfu", ()), ("slru", ()), ("priority", ())]
    policies += [("tlru", pc) for pc in tlru]
    out = []
    for levers in (BLOCKS, TOKENS):
        default = levers.profile.default_pool_tokens // levers.unit_tokens
        pools = [default // 2, default, default + default // 10, 2 * default]
        for (pol, pc), pool in itertools.product(policies, pools):
            out.append((Config(pol, pool, policy_config=pc), levers))
            for ratio, write in itertools.product(HOST_RATIOS, WRITE_POLICIES):
                out.append((Config(pol, pool, ratio, write, policy_config=pc), levers))
        for backend in STORAGE_ENV:
            out.append((Config("lru", default, 4.0, "write_through", storage=backend), levers))
    return out


def _advise_lines(tmp_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """The lines a real advise run prints (JSON), with --replicas: (SGLang argvs, smg argvs)."""
    from harness.commands.advise import build_parser, run

    out = tmp_path / "out"
    args = build_parser("advise").parse_args(
        [str(REPO / "workloads/replicas-shared-prefix.yaml"), "--card", "L4", "--replicas", "2",
         "--workers", "1", "-o", str(out), "--quiet"]
    )  # fmt: skip
    assert run(args) == 0
    d = json.loads((out / "advise.json").read_text())
    lines = [c["launch"] for c in d["candidates"]]
    rec = d["recommendation"]
    lines += [rec["launch"], rec["baseline_launch"], *(s["launch"] for s in rec["steps"] if "launch" in s)]
    if rec["better_candidate"]:
        lines.append(rec["better_candidate"]["launch"])
    fleets = d["replicas"]["router_launch"].values()
    lines += [w for f in fleets for w in f["workers"]]
    assert fleets, "advise --replicas 2 names no fleet"
    for ln in lines:  # the shell reads the line back as exactly the environment and the argv
        assert shlex.split(ln["line"]) == [f"{k}={v}" for k, v in ln["env"].items()] + ln["argv"]
    return [ln["argv"][3:] for ln in lines], [f["router"]["argv"][2:] for f in fleets]


def test_every_smg_line_parses_with_smg_1_13s_own_parser() -> None:
    # the `router` extra (make installs it): smg 1.13.0; a bare '.[dev]' install skips
    launch_router = pytest.importorskip("smg.launch_router", reason="the router extra (smg) is absent")

    urls = worker_urls(4, 2)
    for policy in ("round_robin", "cache_aware", "prefix_hash", "least_load"):
        args = smg_line(policy, urls).args
        parsed = launch_router.parse_router_args(args)
        assert parsed.policy == policy and list(parsed.worker_urls) == urls and parsed.port == 30000
    with pytest.raises(SystemExit):  # control: smg's parser refuses what it does not know
        launch_router.parse_router_args(["--policy", "no_such_policy"])


CHECK = """
import argparse, json, sys
from sglang.srt.arg_groups.kv_cache_hook import handle_cache_compatibility
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.loads(sys.stdin.read()):
    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    try:
        handle_cache_compatibility(ServerArgs.from_cli_args(p.parse_args(argv)))
        out.append("")
    except SystemExit as e:
        out.append(f"argparse exit {e.code}")
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print("__RESULTS__" + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
def test_every_line_advise_can_emit_parses_with_sglang_0_5_23s_own_parser(tmp_path: Path) -> None:
    from harness.servers.sglang_cpu.flags import cpu_env
    from tests.helpers.sglang_venv import sglang_cpu_env

    env = sglang_cpu_env("SGLang 0.5.23 CPU venv from its lock file")
    argvs = [sglang_line(c, lv, "llama-3.1-8b-instruct", port=30001).args for c, lv in _every_config()]
    emitted, smg_argvs = _advise_lines(tmp_path)
    argvs += emitted
    controls = [
        ["--model-path", "m", "--no-such-flag"],
        ["--model-path", "m", "--radix-eviction-policy", "tlru",
         "--radix-eviction-policy-config", '{"next_prompt_estimate":54,"threshold":13}'],
    ]  # fmt: skip
    r = subprocess.run(
        [str(env.python), "-c", CHECK],
        input=json.dumps(argvs + controls),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **cpu_env({})},
    )
    assert "__RESULTS__" in r.stdout, r.stderr[-3000:]
    results = json.loads(r.stdout.rsplit("__RESULTS__", 1)[1])
    assert len(results) == len(argvs) + len(controls)
    refused = [(a, e) for a, e in zip(argvs, results[: len(argvs)], strict=True) if e]
    assert refused == [], refused[:3]
    assert len(argvs) > 400
    assert results[-2].startswith("argparse exit") or "unrecognized" in results[-2]
    assert "needs 'threshold' greater than 'next_prompt_estimate'" in results[-1]
    import smg.launch_router as launch_router

    for a in smg_argvs:
        launch_router.parse_router_args(a)
