"""Differential tests: the sim's tree against SGLang 0.5.23's own RadixCache / UnifiedRadixCache.

Ops: ["insert", toks, priority, inserted_len], ["match", toks], ["lock", toks] (match + inc_lock_ref),
["unlock", i], ["evict", n] -> [freed, evicted node keys in order], ["sizes"], ["serve", toks, capacity],
["trace", [keys], capacity] -> [device hit tokens, evicted tokens, device size].
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from .hostops import random_host_ops
from .local import run_local

# the first run builds the oracle venv (~2.5 GB of packages, minutes on 2 cores) inside the fixture
# every oracle test starts the oracle venv's python: slow as well as oracle
pytestmark = [pytest.mark.oracle, pytest.mark.slow, pytest.mark.timeout(2400)]

POLICIES = ["lru", "lfu", "fifo", "mru", "filo", "priority", "slru"]
TRACE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def random_ops(seed: int, n_ops: int = 160) -> list:
    """Sessions that grow (multi-turn), shared system prompts, partial matches, locks, evictions."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(1, 12))] for _ in range(4)]
    seqs: list[list[int]] = []
    ops: list = []
    locks = 0
    unlocked: list[int] = []
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.45 or not seqs:
            if seqs and rng.random() < 0.5:  # next turn of an earlier session
                base = rng.choice(seqs)
                base = base[: rng.randrange(len(base) + 1)]
            else:
                base = list(rng.choice(prefixes))
            s = base + [rng.randrange(1000) for _ in range(rng.randrange(1, 10))]
            seqs.append(s)
            ops.append(["insert", s, rng.randrange(3)])
        elif r < 0.7:
            s = rng.choice(seqs)
            cut = rng.randrange(1, len(s) + 1)
            tail = [rng.randrange(1000)] if rng.random() < 0.5 else []
            ops.append(["match", s[:cut] + tail])
        elif r < 0.78 and locks < 6:
            ops.append(["lock", rng.choice(seqs)])
            unlocked.append(locks)
            locks += 1
        elif r < 0.83 and unlocked:
            ops.append(["unlock", unlocked.pop(rng.randrange(len(unlocked)))])
        elif r < 0.97:
            ops.append(["evict", rng.randrange(1, 20)])
        else:
            ops.append(["sizes"])
    ops.append(["sizes"])
    return ops


def chunked_ops(seed: int, n_requests: int = 40) -> list:
    """Requests inserted as chunked prefill does: checkpoints of a growing prefix, each with what the request
    inserted before (InsertParams.inserted_len, req.kv.cache_inserted_len), then the whole sequence; between
    them matches and evictions, so the hit counts those inserts leave decide what lfu and slru evict."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(4, 16))] for _ in range(3)]
    seqs: list[list[int]] = []
    ops: list = []
    for _ in range(n_requests):
        if seqs and rng.random() < 0.5:
            base = rng.choice(seqs)
            base = base[: rng.randrange(1, len(base) + 1)]
        else:
            base = list(rng.choice(prefixes))
        s = base + [rng.randrange(1000) for _ in range(rng.randrange(2, 24))]
        seqs.append(s)
        ops.append(["match", s])
        cuts = sorted(rng.sample(range(1, len(s)), k=min(len(s) - 1, rng.randrange(0, 4))))
        inserted = 0
        for cut in [*cuts, len(s)]:
            ops.append(["insert", s[:cut], 0, inserted])
            inserted = max(inserted, cut)
        if rng.random() < 0.5:
            ops.append(["evict", rng.randrange(4, 40)])
    ops.append(["sizes"])
    return ops


def scenarios() -> list[dict]:
    out = []
    for page in (1, 4):
        for flavor in ("unified", "radix"):
            for policy in POLICIES:
                for seed in range(3):
                    out.append(
                        {
                            "policy": policy,
                            "page_size": page,
                            "flavor": flavor,
                            "ops": random_ops(seed * 31 + page + (7 if flavor == "unified" else 0)),
                        }
                    )
        for cfg in (
            {"threshold": 8, "next_prompt_estimate": 2},
            {"threshold": 20, "next_prompt_estimate": 4},
        ):
            for seed in range(3):
                out.append(
                    {
                        "policy": "tlru",
                        "policy_config": cfg,
                        "page_size": page,
                        "flavor": "unified",
                        "ops": random_ops(seed * 17 + page),
                    }
                )
        for flavor in ("unified", "radix"):  # chunked prefill's checkpoints: the hit counts lfu and slru read
            for policy in ("lfu", "slru", "lru"):
                for seed in range(3):
                    ops = chunked_ops(seed * 13 + page + (5 if flavor == "unified" else 0))
                    out.append({"policy": policy, "page_size": page, "flavor": flavor, "ops": ops})
    return out


def test_random_sequences_match_sglang(run_oracle):
    specs = scenarios()
    theirs = run_oracle(specs)
    agree = 0
    for spec, expected in zip(specs, theirs, strict=True):
        got = run_local(spec)
        for i, (op, a, b) in enumerate(zip(spec["ops"], got, expected, strict=True)):
            assert a == b, (
                f"{spec['policy']} page={spec['page_size']} flavor={spec['flavor']}: op {i} {op[0]} "
                f"sim={a} sglang={b}"
            )
        agree += len(got)
    print(f"oracle: {len(specs)} scenarios, {agree} operations identical to SGLang 0.5.23")


WRITE_POLICIES = ["write_through", "write_through_selective", "write_back"]


def host_scenarios() -> list[dict]:
    """Every policy x write policy x page size, host pools from smaller than the device pool to 2x it."""
    out = []
    for page in (1, 4):
        for wp in WRITE_POLICIES:
            for policy in POLICIES:
                for seed in range(3):
                    out.append(
                        {
                            "policy": policy,
                            "page_size": page,
                            "flavor": "unified",
                            "host": (24, 64, 128)[seed],
                            "write_policy": wp,
                            "ops": random_host_ops(seed * 101 + page * 7 + WRITE_POLICIES.index(wp)),
                        }
                    )
            out.append(
                {
                    "policy": "tlru",
                    "policy_config": {"threshold": 20, "next_prompt_estimate": 4},
                    "page_size": page,
                    "flavor": "unified",
                    "host": 64,
                    "write_policy": wp,
                    "ops": random_host_ops(991 + page + WRITE_POLICIES.index(wp)),
                }
            )
    # the same sequences through 0.5.23's Python TreeCore too (the server loads the bundled Rust one)
    return out + [dict(spec, tree_core="python") for spec in out]


def test_host_tier_matches_sglang(run_oracle):
    """HiCache's host tier: the same operations through SGLang's UnifiedRadixCache with a host pool (and a
    copy engine whose copies land when polled) and through the sim; device and host hits, sizes, host
    tokens, evictions, backups and load-backs agree after every operation."""
    specs = host_scenarios()
    theirs = run_oracle(specs)
    agree = loads = backups = 0
    for spec, expected in zip(specs, theirs, strict=True):
        got = run_local(spec)
        for i, (op, a, b) in enumerate(zip(spec["ops"], got, expected, strict=True)):
            assert a == b, (
                f"{spec['policy']} {spec['write_policy']} page={spec['page_size']} host={spec['host']} "
                f"core={spec.get('tree_core', 'default')}: "
                f"op {i} {op[0]} sim={a} sglang={b} ([result, evictable, protected, host used, evicted, "
                "backups, load-backs])"
            )
        agree += len(got)
        backups += expected[-1][5]
        loads += expected[-1][6]
    assert loads > 0 and backups > 0
    print(
        f"oracle host tier: {len(specs)} scenarios (Rust and Python TreeCore), {agree} operations identical"
        f" to SGLang 0.5.23 ({backups} backups, {loads} load-backs)"
    )


def _trace_keys(limit: int | None = None) -> list[list[int]]:
    keys = []
    with TRACE.open() as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            keys.append(json.loads(line)["hash_ids"])
    return keys


@pytest.mark.slow
@pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} not present")
def test_mooncake_replay_matches_sglang(run_oracle):
    """Block-granularity replay of the Mooncake trace: identical hits, evictions and final size per pool,
    through the same path `harness whatif` takes."""
    from harness.whatif.grid import Config
    from harness.whatif.inputs import read_mooncake
    from harness.whatif.replay import replay

    keys = _trace_keys()
    head = keys[:4000]
    full = [  # SGLang takes ~10 s per large pool
        ("lru", 2000, "unified"),
        ("lfu", 2000, "unified"),
        ("slru", 2000, "unified"),
        ("lru", 20000, "unified"),
        ("lru", 2000, "radix"),
        ("lfu", 2000, "radix"),
        ("lru", 20000, "radix"),
    ]
    specs = [
        {"policy": policy, "page_size": 1, "flavor": flavor, "ops": [["trace", keys, pool]]}
        for policy, pool, flavor in full
    ]
    for flavor in ("unified", "radix"):
        specs.append({"policy": "lru", "page_size": 4, "flavor": flavor, "ops": [["trace", head, 4000]]})
    specs.append(
        {
            "policy": "tlru",
            "policy_config": {"threshold": 16, "next_prompt_estimate": 4},
            "page_size": 1,
            "flavor": "unified",
            "ops": [["trace", head, 4000]],
        }
    )
    theirs = run_oracle(specs)
    trace = read_mooncake(TRACE)
    for spec, expected in zip(specs, theirs, strict=True):
        pool = spec["ops"][0][2]
        assert run_local(spec) == expected, (spec["policy"], pool)
        if len(spec["ops"][0][1]) == len(keys) and spec["page_size"] == 1:
            r = replay(trace, Config(spec["policy"], pool, tree=spec["flavor"]))
            assert r.evicted_tokens == expected[0][1] * trace.unit, (spec["policy"], pool, spec["flavor"])
        print(
            f"oracle mooncake: {spec['policy']} pool={pool} {spec['flavor']}: hits/evicted/size {expected[0]}"
        )
