"""Which SGLang tree the sim and `harness whatif` reproduce: unified by default, radix on request."""

from __future__ import annotations

import pytest

from harness.sim.args import build_parser
from harness.sim.engine import Engine, EngineConfig
from tests.helpers.cli import harness


def parse(*argv: str):
    return build_parser("serve-sim").parse_args(list(argv))


def test_serve_sim_builds_the_unified_tree_by_default():
    ns = parse()
    assert ns.sim_radix_tree == "unified"
    assert Engine(EngineConfig.from_args(ns)).tree.flavor == "unified"
    ns = parse("--sim-radix-tree", "radix", "--radix-eviction-policy", "lfu")
    assert Engine(EngineConfig.from_args(ns)).tree.flavor == "radix"


def test_serve_sim_tlru_needs_the_unified_tree(capsys):
    cfg = '{"threshold": 64, "next_prompt_estimate": 8}'
    ns = parse("--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", cfg)
    assert Engine(EngineConfig.from_args(ns)).tree.flavor == "unified"
    with pytest.raises(SystemExit) as e:
        parse(
            "--radix-eviction-policy",
            "tlru",
            "--radix-eviction-policy-config",
            cfg,
            "--sim-radix-tree",
            "radix",
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--sim-radix-tree radix" in err and "tlru" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_whatif_tree_flag(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "hash_ids": [1, 2]}\n{"timestamp": 1, "hash_ids": [1, 3]}\n')
    cmd = ["whatif", str(trace), "--pool", "8", "--json"]
    ok = harness(*cmd, "--tree", "radix")
    assert ok.returncode == 0, ok.stderr
    assert '"tree": "radix"' in ok.stdout
    default = harness(*cmd)
    assert '"tree": "unified"' in default.stdout
    tlru = ["--policy", "tlru", "--policy-config", '{"threshold": 4, "next_prompt_estimate": 1}']
    bad = harness(*cmd, "--tree", "radix", *tlru)
    assert bad.returncode == 2 and "--tree radix" in bad.stderr and "Traceback" not in bad.stderr
