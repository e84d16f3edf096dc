"""Each advised configuration as the command that runs it: `python -m sglang.launch_server ...` for SGLang
0.5.23 and, in front of replicas, `smg launch ...` for smg 1.13.0, as typed argv with the environment.

Everything is in tokens, whatever unit the input's pools are in: the device pool as `--max-total-tokens`
(the size that was replayed; SGLang caps its pool there), the memory lever that makes room for it
(`--mem-fraction-static`, `--kv-cache-dtype fp8_e4m3`; harness.advise.levers), the eviction policy and its
config with SGLang's own keys (tlru's `threshold` and `next_prompt_estimate`, scaled from blocks to
tokens), the host tier as `--hicache-ratio` of that pool (or `--hicache-size` GB, a replica's whole host share), and the storage backend with the environment
variables its SGLang client reads. tests/advise/test_launch_line.py parses every line advise can
emit with SGLang 0.5.23's own parser and every smg line with smg 1.13.0's.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.advise.grid import policy_config_tokens
from harness.advise.levers import Levers
from harness.whatif.grid import Config

SGLANG_VERSION = "0.5.23"
SMG_VERSION = "1.13.0"
SGLANG_LAUNCH = ("python", "-m", "sglang.launch_server")
SGLANG_PORT = 30000  # SGLang's default --port; replica i listens on SGLANG_PORT + 1 + i behind smg
SMG_PORT = 30000
FP8_KV = "fp8_e4m3"
# The Hugging Face id a built-in model is served from (harness.sim.models.BUILTIN's configs)
HF_IDS = {
    "llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
}
DEFAULT_HF_ID = "meta-llama/Llama-3.1-8B-Instruct"
# Where each L3 backend's SGLang 0.5.23 client takes its settings from (values the site supplies are
# <placeholders>): HiCacheFile's directory (mem_cache/hicache_storage.py), Mooncake's master and metadata
# server (mem_cache/storage/mooncake_store/mooncake_store.py MooncakeStoreConfig.load_from_env), 3FS's
# client config (mem_cache/storage/hf3fs/storage_hf3fs.py), NIXL's file directory
# (mem_cache/storage/nixl/hicache_nixl.py).
STORAGE_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "file": (("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "/tmp/hicache"),),
    "mooncake": (
        ("MOONCAKE_MASTER", "<master-host>:50051"),
        ("MOONCAKE_TE_META_DATA_SERVER", "http://<master-host>:8080/metadata"),
        ("MOONCAKE_PROTOCOL", "rdma"),
        ("MOONCAKE_DEVICE", "<rdma-device>"),
        ("MOONCAKE_GLOBAL_SEGMENT_SIZE", "4gb"),
    ),
    "hf3fs": (("SGLANG_HICACHE_HF3FS_CONFIG_PATH", "<hf3fs-client-config.json>"),),
    "nixl": (("SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR", "/tmp/hicache-nixl"),),
}


@dataclass(frozen=True)
class LaunchLine:
    """One command: its argv (program first) and the environment it needs set."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def args(self) -> list[str]:
        """The flags alone, after the program (what a parser of the program's flags takes)."""
        n = len(SGLANG_LAUNCH) if self.argv[: len(SGLANG_LAUNCH)] == SGLANG_LAUNCH else 2
        return list(self.argv[n:])

    def line(self) -> str:
        """The shell line: the environment, then the quoted argv."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return (env + " " if env else "") + shlex.join(self.argv)

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "env": dict(self.env), "line": self.line()}


def model_path(model: str | None) -> str:
    """What `--model-path` names: a folder as given, a built-in by its Hugging Face id, else as given."""
    if not model:
        return DEFAULT_HF_ID
    if Path(model).expanduser().is_dir() or "/" in model:
        return model
    return HF_IDS.get(model.lower(), model)


def sglang_line(
    cfg: Config,
    levers: Levers,
    model: str | None,
    *,
    port: int | None = None,
    gpus: str | None = None,
    storage_dir: str | None = None,
) -> LaunchLine:
    """`cfg` as SGLang 0.5.23's launch command (tokens throughout; see the module doc)."""
    tokens = levers.tokens(cfg.pool)
    argv: list[str] = [*SGLANG_LAUNCH, "--model-path", model_path(model)]
    if levers.tp > 1:
        argv += ["--tp", str(levers.tp)]
    if port is not None:
        argv += ["--port", str(port)]
    argv += ["--max-total-tokens", str(tokens)]
    notes: list[str] = []
    lever = levers.pool_lever(cfg.pool)
    if lever is None:
        notes.append(
            f"no memory lever reaches {tokens:,} tokens on this card (past FP8 KV at the top fraction)"
        )
    else:
        if lever.fraction is not None:
            argv += ["--mem-fraction-static", f"{lever.fraction:.3f}"]
        if lever.kind == "fp8":
            argv += ["--kv-cache-dtype", FP8_KV]
    argv += ["--radix-eviction-policy", cfg.policy]
    pc = policy_config_tokens(cfg, levers.unit_tokens)
    if pc:
        argv += ["--radix-eviction-policy-config", json.dumps(pc, sort_keys=True, separators=(",", ":"))]
    env: list[tuple[str, str]] = []
    if cfg.host_ratio > 0:
        gb = levers.size_gb(cfg.pool, cfg.host_ratio)  # a replica's whole host share: GB, not a ratio
        size = ["--hicache-ratio", f"{cfg.host_ratio:g}"] if gb is None else ["--hicache-size", f"{gb:g}"]
        argv += ["--enable-hierarchical-cache", *size, "--hicache-write-policy", cfg.write_policy]
        if cfg.storage:
            argv += ["--hicache-storage-backend", cfg.storage]
            for k, v in STORAGE_ENV.get(cfg.storage, ()):
                env.append((k, storage_dir if storage_dir is not None and k.endswith("_DIR") else v))
    argv += ["--enable-cache-report", "--enable-metrics"]
    if gpus is not None:
        env.insert(0, ("CUDA_VISIBLE_DEVICES", gpus))
    return LaunchLine(tuple(argv), tuple(env), tuple(notes))


def worker_urls(replicas: int, per_node: int) -> list[str]:
    """Each replica's URL as smg names it: replica i on node i // per_node, port SGLANG_PORT + 1 + the
    replica's place on its node (one node: 127.0.0.1; more: <node-j> for the operator to fill)."""
    nodes = -(-replicas // per_node)
    out = []
    for i in range(replicas):
        host = "127.0.0.1" if nodes == 1 else f"node-{i // per_node}"
        out.append(f"http://{host}:{SGLANG_PORT + 1 + i % per_node}")
    return out


def replica_lines(
    cfg: Config,
    levers: Levers,
    model: str | None,
    replicas: int,
    per_node: int,
    shared_dir: str | None = None,
) -> list[LaunchLine]:
    """The workers of one node: replica k on GPU k at its own port (every node runs the same lines)."""
    return [
        sglang_line(cfg, levers, model, port=SGLANG_PORT + 1 + k, gpus=str(k), storage_dir=shared_dir)
        for k in range(min(replicas, per_node))
    ]


def smg_line(policy: str, urls: list[str], port: int = SMG_PORT) -> LaunchLine:
    """smg 1.13.0's gateway in front of the workers, with the routing policy the replicas step chose."""
    return LaunchLine(("smg", "launch", "--port", str(port), "--worker-urls", *urls, "--policy", policy))


def fleet_launch(
    replicas: int, cfg: Config, policy: str, shared_l3: bool, levers: Levers, model: str | None, per_node: int
) -> dict:
    """One fleet's lines: the workers of one node (each node runs the same) and smg in front of them all."""
    k = min(replicas, per_node)
    shared = "/mnt/shared/hicache" if shared_l3 and -(-replicas // k) > 1 else None  # nodes share a mount
    workers = replica_lines(cfg, levers, model, replicas, k, shared)
    router = smg_line(policy, worker_urls(replicas, k))
    return {
        "replicas": replicas,
        "replicas_per_node": k,
        "nodes": -(-replicas // k),
        "shared_l3": shared_l3,
        "workers": [w.to_dict() for w in workers],
        "router": router.to_dict(),
    }
