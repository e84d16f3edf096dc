"""`advise --replicas … --confirm K`: the routing step's fleets launched as `replicas:` profiles behind smg.

Each replica count's chosen fleet (its policy on the configuration advise chose) becomes one server
profile with `replicas: N` and `router: {policy: …}`, resolved for the server kind and run through bench's
plan and loop as `--confirm` runs single servers (harness.advise.confirm); the point is then replayed as
the gateway routed it and drawn by the model (harness.summarize.routing_check), so each worker's
measured hit rate stands beside its prediction.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.advise.advice import Advice
from harness.advise.confirm import Launch, config_args, plan_live
from harness.advise.confirm_info import ConfirmInfo
from harness.advise.live_spec import live_block, live_spec
from harness.advise.replicas import ReplicaAdvice, Row
from harness.engines.confirm import CONFIRM_TARGETS
from harness.errors import HarnessError
from harness.sim.timing import CardProfile
from harness.whatif.grid import Config
from harness.whatif.trace import Trace


def fleets(ra: ReplicaAdvice, k: int) -> list[Row]:
    """The first K replica counts' chosen fleets, fewest replicas first."""
    return [ra.chosen[n] for n in sorted(ra.chosen)][:k]


@dataclass(frozen=True)
class SlicedFleet:
    """A fleet as `--confirm-requests N` launches it: each replica's pool scaled to the slice as a single
    candidate's is (harness.advise.confirm_slice), and predicted by the table's routing replay on it."""

    pool: int
    hit_rate: float


def sliced_fleets(
    rows: list[Row], base: Config, whole: Trace, part: Trace, profile: CardProfile, live_unit: int
) -> list[SlicedFleet]:
    """Each fleet on the slice (each replica runs `base` at the row's host tier, as launched): the measured
    traffic and the prediction are the same requests and pools."""
    from harness.advise.confirm_slice import scale_pool
    from harness.advise.replicas import fleet_row

    out = []
    for r in rows:
        pool = scale_pool(r.pool, whole, part, live_unit)
        cfg = dataclasses.replace(base, pool=pool, host_ratio=r.host_ratio, storage="")
        out.append(SlicedFleet(pool, fleet_row(part, cfg, r.replicas, r.policy, profile).hit_rate))
    return out


def confirm_replicas(
    path: Path,
    a: Advice,
    launch: Launch,
    keep: Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    on_stop: Callable[[KeyboardInterrupt], None] | None = None,
    trace: Trace | None = None,
) -> list[dict[str, Any]]:
    """Launch each chosen fleet for the input's first point and compare; `keep` holds captures and logs.
    `on_stop`: a stop (time limit, Ctrl-C) is handed to it and the fleets that finished are still reported;
    without it the stop goes on up. With `--confirm-requests N` the fleets replay the trace's first N
    requests (`trace`: the whole input, read again when not given), as the single candidates do."""
    from harness.advise.confirm_rows import read_point
    from harness.summarize.routing_check import check_point

    ra = a.replicas
    if ra is None or not ra.chosen:
        raise HarnessError("--confirm with --replicas: no fleet of 2 or more replicas to launch")
    if not CONFIRM_TARGETS[launch.server_kind].replicas:
        kinds = [t.kind for t in CONFIRM_TARGETS.values() if t.replicas]
        raise HarnessError(
            f"--confirm with --replicas: smg fleets run on {', '.join(kinds[:-1])} or {kinds[-1]} here"
        )
    rows = fleets(ra, launch.k)
    base: Config = a.recommendation.chosen.config
    launch_as = CONFIRM_TARGETS[launch.server_kind].launch  # `launch: sglang`, as every kind with smg fleets
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="advise-replicas-") as tmp:
        root = keep if keep is not None else Path(tmp)
        block = live_block(launch.server_kind, a.unit_tokens, launch.block_tokens)
        sliced: list[SlicedFleet] | None = None
        if launch.requests is not None:
            from harness.advise.confirm_slice import slice_file
            from harness.whatif.inputs import read_mooncake

            whole = trace if trace is not None else read_mooncake(path, a.unit_tokens)
            path = slice_file(path, launch.requests, root)
            part = read_mooncake(path, a.unit_tokens)
            if a.levers is None:
                raise HarnessError("--confirm-requests with --replicas: no card profile to predict the slice")
            sliced = sliced_fleets(rows, base, whole, part, a.levers.profile, block.tokens)
        live = live_spec(path, root, block.tokens, a.unit_tokens)
        servers = []
        for i, r in enumerate(rows, 1):
            pool = sliced[i - 1].pool if sliced is not None else r.pool
            cfg = dataclasses.replace(base, pool=pool, host_ratio=r.host_ratio, storage="")
            args = config_args(cfg, live.unit_tokens, launch.server_kind)
            servers.append({"name": f"fleet-{i}", "launch": launch_as, "args": args, "replicas": r.replicas,
                            "router": {"policy": r.policy}})  # fmt: skip
        run = plan_live(live, servers, launch, root / "cap-replicas")
        stopped = False
        try:
            points = run.run(log)
        except KeyboardInterrupt as e:
            if on_stop is None:
                raise
            on_stop(e)
            stopped = True
            points = [d if d.is_dir() and read_point(d).status == "ok" else None for d in run.dirs]
        for i, (r, pdir) in enumerate(zip(rows, points, strict=True)):
            predicted = sliced[i].hit_rate if sliced is not None else r.hit_rate
            entry: dict[str, Any] = {"fleet": r.label(), "server_kind": launch.server_kind,
                                     "predicted_hit_rate": round(predicted, 6)}  # fmt: skip
            if sliced is not None:
                entry |= {
                    "slice_requests": launch.requests,
                    "pool": sliced[i].pool,
                    "pool_scaled_from": r.pool,
                }
            if pdir is None:
                status = "not run" if stopped else "failed"  # a fleet stopped part way is not reported
                out.append(entry | {"status": status, "measured_hit_rate": None, "workers": []})
                continue
            c = check_point(pdir)
            d = c.to_dict()
            out.append(
                entry
                | {
                    "status": "ok",
                    "measured_hit_rate": round(c.measured_hit_rate, 6),
                    "followed_hit_rate": round(c.followed_hit_rate, 6),
                    "drawn_hit_rate": round(c.predicted_mean, 6),
                    "difference_points": round((c.measured_hit_rate - predicted) * 100, 3),
                    "off_model": c.off_model,
                    "workers": d["workers"],
                }
            )
    return out


def confirm_fleets(
    path: Path, a: Advice, launch: Launch, keep: Path | None, info: ConfirmInfo, trace: Trace | None = None
) -> list[dict[str, Any]]:
    """confirm_replicas under what is left of --confirm-time-limit; stopped (the limit, Ctrl-C, SIGTERM), the
    confirm is partial: the fleets that finished are reported, the running one is not (its workers' figures
    need the whole point), and the single servers measured before stay."""
    from harness.advise.confirm_progress import display
    from harness.advise.confirm_stop import TimeLimit, stop_of

    left = None if info.time_limit_s is None else max(info.time_limit_s - info.elapsed_s, 0.001)
    limit = TimeLimit(left, info.time_limit_s)

    def stopped(e: KeyboardInterrupt) -> None:
        info.stop = stop_of(e, limit)
        info.notes.append(
            "The replicas fleets were stopped: those that finished are reported, the running one is not."
        )

    try:
        with display(launch.quiet) as shown, limit:  # the fleets' bars on stderr, as the candidates'
            log = shown.log if shown is not None else lambda _msg: None
            return confirm_replicas(path, a, launch, keep, log, stopped, trace)
    finally:
        info.elapsed_s += limit.elapsed()
