"""The node advise sizes for: its host memory, its GPUs, and how many replicas share them.

`--host-memory` is a node's; the replicas on one node (`--replicas-per-node K`, default all of them, as
far as the node's GPUs go) split it, so each replica's host tier gets its share. Without `--host-memory`
the machine advise runs on is read when it has the card's GPU (NVML names it), else the card's typical
host (`Card.host_mem_gb`); the headline says which.

A unified-memory card (the GB10: `Card.unified`) is one GPU whose CPU and GPU share one memory, which
already holds the weights, the device pool and SGLang's reserve: its node has that one GPU, and its host
tier only what those leave (`unified_host_gb`), so a host tier trades GB for GB against the device pool.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.sim.timing import CardProfile

DEFAULT_GPUS_PER_NODE = 8  # an HGX / DGX node of the data-centre cards


@dataclass(frozen=True)
class Machine:
    """What NVML and the OS say about this machine: its GPUs of the card's kind and its memory."""

    gpus: int  # GPUs whose NVML name matches the card
    gpu_name: str
    host_memory_gb: float


@dataclass(frozen=True)
class Node:
    host_memory_gb: float | None  # the node's (None: no card, nothing to size against)
    source: str  # where that figure comes from, in words
    gpus: int  # GPUs per node
    gpus_source: str
    replicas: int  # the largest --replicas count (1 without --replicas)
    per_node: int  # replicas sharing one node's memory and GPUs
    per_node_given: bool = False
    unified: str = ""  # a unified-memory card: the trade a host tier makes there, in words

    @property
    def nodes(self) -> int:
        return -(-self.replicas // self.per_node)

    @property
    def share_gb(self) -> float | None:
        """Host memory one replica's host tier may take."""
        return None if self.host_memory_gb is None else self.host_memory_gb / self.per_node

    def sentence(self) -> str:
        """The node, in one sentence, for the headline's neighbourhood and the notes."""
        mem = (
            "unknown host memory"
            if self.host_memory_gb is None
            else f"{self.host_memory_gb:g} GB host memory"
        )
        gpus = f"{self.gpus} GPU" + ("s" if self.gpus != 1 else "")
        text = f"node: {mem} ({self.source}), {gpus} ({self.gpus_source})"
        if self.replicas > 1:
            how = "--replicas-per-node" if self.per_node_given else "default: all replicas on one node"
            text += (
                f"; {self.per_node} of the {self.replicas} replicas per node ({how}), {self.nodes} node"
                + ("s" if self.nodes > 1 else "")
                + (
                    f", so each replica's host tier has {self.share_gb:g} GB"
                    if self.share_gb is not None
                    else ""
                )
            )
        return text

    def to_dict(self) -> dict:
        return {
            "host_memory_gb": self.host_memory_gb,
            "host_memory_source": self.source,
            "gpus_per_node": self.gpus,
            "gpus_source": self.gpus_source,
            "replicas": self.replicas,
            "replicas_per_node": self.per_node,
            "nodes": self.nodes,
            "host_memory_per_replica_gb": self.share_gb,
            "unified_memory": self.unified or None,
        }


def this_machine(profile: CardProfile) -> Machine | None:
    """This machine when NVML sees the card's GPU here (its count and the host's memory), else None."""
    from harness.telemetry import nvml

    hw = getattr(profile, "hw", None)
    if hw is None:
        return None
    nv, _why = nvml.load()
    if nv is None or nvml.init(nv) is not None:
        return None
    try:
        names = [nvml.text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))) for i in
                 range(int(nv.nvmlDeviceGetCount()))]  # fmt: skip
    except Exception:  # a driver that answers init but not the queries: no GPU to speak of
        return None
    finally:
        nvml.shutdown(nv)
    key = hw.name.split("-")[0].upper()  # h100 -> H100, a100-80g -> A100
    match = [n for n in names if key in n.upper()]
    if not match:
        return None
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return Machine(len(match), match[0], round(mem, 1))


def unified_host_gb(profile: CardProfile, total_gb: float, pool_tokens: int) -> tuple[float, str]:
    """What a unified memory of `total_gb` leaves a host tier after the weights, a device pool of
    `pool_tokens` and SGLang's reserve (activations, CUDA graphs: harness.sim.gpu_memory), and the trade."""
    from harness.sim import gpu_memory

    hw, shape = getattr(profile, "hw", None), getattr(profile, "shape", None)
    assert hw is not None and shape is not None
    weights = shape.weight_bytes / 1e9
    pool = pool_tokens * profile.kv_bytes_per_token / 1e9
    reserve = gpu_memory.reserved_mib(hw) * gpu_memory.MIB / 1e9
    left = max(0.0, round(total_gb - weights - pool - reserve, 1))
    trade = (
        f"the {hw.name.upper()} has one {total_gb:g} GB memory for CPU and GPU, holding the weights "
        f"({weights:.1f} GB), the device pool ({pool:.1f} GB) and SGLang's reserve ({reserve:.1f} GB); a host "
        f"tier takes the {left:g} GB they leave, and any more comes out of the device pool (a smaller "
        "--mem-fraction-static): a bigger device pool or a host tier, from the same memory"
    )
    return left, trade


def resolve(
    profile: CardProfile,
    host_memory_gb: float | None,
    replicas: int,
    per_node: int | None,
    gpus_per_node: int | None,
    machine: Machine | None = None,
    pool_tokens: int | None = None,
) -> Node:
    """The node from the flags, this machine (when it has the GPU) and the card's typical host; on a
    unified-memory card, one GPU and the memory the pool (`pool_tokens`, default the card's) leaves. With one
    replica (no --replicas) `--replicas-per-node K` is honored as given: K replicas share the node, so the
    one advised gets a K-th of its host memory; with a fleet, K caps how many of its replicas a node holds."""
    hw = getattr(profile, "hw", None)
    if hw is not None and hw.unified and getattr(profile, "shape", None) is not None:
        total = host_memory_gb if host_memory_gb is not None else float(hw.mem_gb)
        left, trade = unified_host_gb(profile, total, pool_tokens or profile.default_pool_tokens)
        src = f"the {hw.name.upper()}'s unified memory less the weights, the device pool and SGLang's reserve"
        if per_node is not None and per_node > 1:
            raise HarnessError(
                f"--replicas-per-node: {per_node}, but a {hw.name} node has one GPU (unified memory)"
            )
        one = f"a {hw.name.upper()} is one GPU"
        return Node(left, src, 1, one, replicas, 1, per_node is not None, trade)
    if host_memory_gb is not None:
        mem, source = host_memory_gb, "--host-memory"
    elif machine is not None:
        mem, source = machine.host_memory_gb, f"this machine, which has {machine.gpus} x {machine.gpu_name}"
    elif hw is not None:
        mem, source = float(hw.host_mem_gb), f"the {hw.name}'s typical host; pass --host-memory for yours"
    else:
        mem, source = None, "no card to size against"
    if gpus_per_node is not None:
        gpus, gsource = gpus_per_node, "--gpus-per-node"
    elif machine is not None:
        gpus, gsource = machine.gpus, "this machine"
    else:
        gpus, gsource = DEFAULT_GPUS_PER_NODE, f"default {DEFAULT_GPUS_PER_NODE}"
    if gpus < 1:
        raise HarnessError(f"--gpus-per-node: {gpus} must be >= 1")
    if per_node is not None:
        if per_node < 1:
            raise HarnessError(f"--replicas-per-node: {per_node} must be >= 1")
        if per_node > gpus:
            raise HarnessError(
                f"--replicas-per-node: {per_node} replicas need a GPU each, more than the node's {gpus} ({gsource})"
            )
        k = per_node if replicas == 1 else min(per_node, replicas)
    else:
        k = min(replicas, gpus)
    return Node(mem, source, gpus, gsource, replicas, max(k, 1), per_node is not None)
