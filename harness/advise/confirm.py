"""`--confirm K`: launch the top K candidates as `harness bench` would, send the same traffic, and put the
measured hit rate beside the predicted one.

Each candidate becomes one `launch: sglang` server profile carrying its SGLang flags (pool, eviction
policy, HiCache ratio and write policy, storage backend); `harness.sweep.plan` resolves it for the server
kind (`sim`, `sglang`, `sglang-cpu`: SGLang's own server on this CPU, or another engine: harness.engines.confirm) exactly as `bench
--server-kind` does, and `harness.sweep.bench.run_plans` starts it, runs the input's first point with its
seed and stops it. The traffic is the input's own: a spec as written; a capture point its manifest's spec
at the point's sweep values and seed; a Mooncake trace a `workload: {kind: trace}` spec over the file
(harness.advise.live_spec). Measured = the cached tokens the server reported over the prompt tokens, from
the point's requests.jsonl. `--confirm-time-limit`, Ctrl-C or SIGTERM stop it early as a partial confirm
(harness.advise.confirm_stop, confirm_rows); while it runs, an estimate and a bar per candidate go to
stderr (confirm_progress).
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import signals
from harness.advise.advice import Advice
from harness.advise.better import ranked
from harness.advise.confirm_info import ConfirmInfo
from harness.advise.confirm_progress import Estimate, estimate
from harness.advise.confirm_stop import EXIT_TIME_LIMIT, TimeLimit, stop_of
from harness.advise.grid import Candidate, policy_config_tokens
from harness.advise.live_spec import SHRUNK_BLOCK, LiveBlock, LiveSpec, live_block, live_spec
from harness.engines.confirm import CONFIRM_TARGETS
from harness.errors import HarnessError
from harness.whatif.grid import Config

TIME_SCALE = 0.02  # modelled seconds per wall second x 50: the lockstep header keeps the order exact
KINDS = tuple(CONFIRM_TARGETS)  # what each kind needs: harness.engines.confirm


@dataclass(frozen=True)
class Launch:
    """What `--confirm` launches: K candidates as this server kind, loading this model."""

    k: int
    server_kind: str = "sim"
    sglang_python: str | None = None
    model: str | None = None  # what the engine loads; the sim models it (None: the spec's model name)
    card: str = "l4"
    block_tokens: int | None = None  # Mooncake traces: tokens per hash id sent live (None: live_block's)
    requests: int | None = None  # --confirm-requests: a slice of the trace (harness.advise.confirm_slice)
    time_limit_s: float | None = None  # --confirm-time-limit: then a partial confirm (confirm_stop)
    quiet: bool = False  # no estimate line, no bars (--quiet)
    slo: Any = None  # --slo (harness.advise.slo.Slo): the attainment beside TTFT at load (None: the default)
    capacity: bool = False  # --confirm-capacity: bench search on the recommendation (confirm_capacity)


def check_confirm(inputs: list[Path], launch: Launch) -> None:
    """Before any work: K, the server kind, and a model for the engines that load one."""
    if launch.k < 0:
        raise HarnessError(f"--confirm: {launch.k} must be >= 0")
    if launch.server_kind not in KINDS:
        raise HarnessError(f"--server-kind: {launch.server_kind!r} is not one of {', '.join(KINDS)}")
    if launch.requests is not None and launch.requests < 1:
        raise HarnessError(f"--confirm-requests: {launch.requests} must be 1 or more")
    if launch.requests is not None and launch.k:
        for p in inputs:
            if p.is_dir() or p.suffix not in (".jsonl", ".json"):
                raise HarnessError(f"--confirm-requests: {p}: a slice is taken of a Mooncake trace only")
    if launch.block_tokens is not None and launch.block_tokens <= 0:
        raise HarnessError(f"--live-block-tokens: {launch.block_tokens} must be positive")
    t = launch.time_limit_s
    if t is not None and not (math.isfinite(t) and t > 0):
        raise HarnessError(f"--confirm-time-limit: {t:g} must be a positive number of seconds")
    if launch.k and CONFIRM_TARGETS[launch.server_kind].loads_model and not launch.model:
        raise HarnessError(
            f"--server-model: --server-kind {launch.server_kind} loads a model: name its folder "
            "(--server-model PATH, or --model PATH)"
        )
    if launch.k:
        for p in inputs:
            if p.is_dir():  # a capture: its manifest's spec, and the files that spec names
                live_spec(p, p, SHRUNK_BLOCK, 1)
    m = launch.model
    if (
        m
        and CONFIRM_TARGETS[launch.server_kind].loads_model  # the sim only models the model it is named
        and m.startswith(("/", ".", "~"))
        and not Path(m).expanduser().exists()
    ):
        raise HarnessError(f"--server-model: {m}: no such folder")


def top(a: Advice, k: int, server_kind: str = "sim") -> list[Candidate]:
    """The K best by hit rate, the recommended configuration first, of those the kind runs (ConfirmTarget.only)."""
    pool = a.candidates
    chosen: Candidate | None = a.recommendation.chosen
    target = CONFIRM_TARGETS.get(server_kind)
    can = target.can_run if target is not None else None
    if can is not None:
        pool = [c for c in pool if can(c.config)]
        chosen = chosen if chosen is not None and can(chosen.config) else None
    rest = ranked(pool)  # the advice's own measure (harness.advise.better)
    head = [chosen] if chosen is not None else []
    return [*head, *[c for c in rest if c is not chosen]][:k]


def server_args(c: Candidate, unit_tokens: int, server_kind: str) -> list[str]:
    """The candidate as server flags (SGLang's; the sim takes the same). `unit_tokens`: tokens per pool
    unit on the live server (a block trace's pool is in blocks)."""
    return config_args(c.config, unit_tokens, server_kind)


def config_args(cfg: Config, unit_tokens: int, server_kind: str) -> list[str]:
    """A what-if configuration as server flags (see server_args); its pool and tlru's lengths in the tokens
    sent live."""
    tokens = cfg.pool * unit_tokens
    policy_config = policy_config_tokens(cfg, unit_tokens)  # tlru's lengths in live tokens
    target = CONFIRM_TARGETS.get(server_kind)
    if target is not None and target.pool_args is not None:
        return target.pool_args(tokens)
    args = ["--enable-cache-report", "--max-total-tokens", str(tokens), "--radix-eviction-policy", cfg.policy]
    if policy_config:
        args += ["--radix-eviction-policy-config", json.dumps(policy_config)]
    if cfg.host_ratio > 0:
        args += ["--enable-hierarchical-cache", "--hicache-ratio", f"{cfg.host_ratio:g}"]
        args += ["--hicache-write-policy", cfg.write_policy]
        if cfg.storage:
            args += ["--hicache-storage-backend", cfg.storage]
    return args


def _options(launch: Launch, capture: Path) -> Any:
    from harness.sweep.plan import BenchOptions

    python = launch.sglang_python
    target = CONFIRM_TARGETS.get(launch.server_kind)
    if target is not None and target.cpu_venv:
        from harness.servers.kind import sglang_cpu_python

        python = sglang_cpu_python(python)
    return BenchOptions(
        node="advise",
        capture=capture,
        summaries=capture.parent / "summaries",
        server_kind=launch.server_kind,
        kind_reason="harness advise --confirm",
        sglang_python=python,
        model=launch.model,
        retries=0,
        time_scale=TIME_SCALE,
        card_profile=launch.card,
        quiet=launch.quiet,  # the bars join advise's own display on stderr (harness.advise.confirm_progress)
        argv=["harness", "advise", "--confirm", str(launch.k)],
    )


def candidate_servers(live: LiveSpec, cands: list[Candidate], launch: Launch) -> list[dict[str, Any]]:
    """Each candidate as a server profile for the live spec (single servers)."""
    target = CONFIRM_TARGETS[launch.server_kind]
    launch_as = target.launch
    servers = []
    for i, c in enumerate(cands, 1):
        args = server_args(c, live.unit_tokens, launch.server_kind)
        if target.served_name and launch.model:
            args += [
                "--served-model-name",
                live.spec.model,
            ]  # the sim models --model, another engine loads it; requests name the spec's
        server: dict[str, Any] = {"name": f"candidate-{i}", "launch": launch_as, "args": args}
        if target.env is not None:
            server["env"] = target.env(c.config.pool, live.unit_tokens)
        servers.append(server)
    return servers


@dataclass
class LiveRun:
    """A planned live point on each server profile: run() runs them; `dirs` is where each point lands."""

    spec: Any
    plan: Any
    opts: Any
    dirs: list[Path]

    def run(self, log: Callable[[str], None] = lambda _msg: None) -> list[Path | None]:
        """Every server in turn; the point folder of each, None where its run did not end ok."""
        from harness.capture.redact import spec_redactor
        from harness.sweep.bench import run_plans

        outcome = run_plans([self.plan], self.opts, spec_redactor([self.spec]), log)
        if outcome.server_failures:
            raise HarnessError(f"--confirm: {outcome.server_failures[0]}")
        out: list[Path | None] = []
        for sp, pdir in zip(self.plan.servers, self.dirs, strict=True):
            ok = outcome.statuses.get(f"{self.spec.name}/{sp.profile.name}/{sp.points[0].name}") == "ok"
            out.append(pdir if ok else None)
        return out


def plan_live(live: LiveSpec, servers: list[dict[str, Any]], launch: Launch, capture: Path) -> LiveRun:
    """The live spec's one point on each server profile (single servers or `replicas:` fleets), planned
    as bench plans it; the point folders are known before anything starts."""
    from harness.capture import point_dir
    from harness.sweep.plan import plan_experiment

    spec = dataclasses.replace(live.spec, servers_raw=servers, matrix_raw=None, seeds=[live.seed])
    opts = _options(launch, capture)
    plan = plan_experiment(spec, opts)
    target = CONFIRM_TARGETS.get(launch.server_kind)
    for sp in plan.servers:
        sp.points = [p for p in sp.points if p.point.sweep == live.point.sweep][:1]
        if target is not None and not target.loads_model and launch.model:
            sp.model = launch.model  # the plan names the spec's model to a kind that loads none (the sim)
    dirs = [
        point_dir(opts.capture, opts.node, spec.name, sp.profile.name, sp.points[0].name)
        for sp in plan.servers
    ]
    return LiveRun(spec, plan, opts, dirs)


def block_predictions(
    cands: list[Candidate], trace: Any, profile: Any, live_unit: int, block: int
) -> list[float] | None:
    """The candidates replayed again at the engine's KV block (SGLang's tree at page size `block`):
    such an engine hits only whole blocks of the prompt's first n-1 tokens, so the page-1 prediction reads
    high by up to a block a request. None when a block is not a whole number of the input's units sent live."""
    from harness.whatif.replay import sweep

    if block % live_unit:
        return None
    page = block // live_unit
    configs = [
        dataclasses.replace(c.config, page_size=page, pool=c.config.pool // page * page) for c in cands
    ]
    return [r.hit_rate for r in sweep(trace, configs, profile, 1)]


def confirm(
    path: Path, a: Advice, launch: Launch, keep: Path | None = None, trace: Any = None, profile: Any = None
) -> tuple[list[dict[str, Any]], ConfirmInfo]:
    """The confirmed rows and how the confirm ran. `keep`: the folder for the servers' logs and the captures
    (kept, as a run's are); else a temporary one. `trace`, `profile`: the advice's input and physics, to
    scale a slice's pools, predict an engine with its own KV block at it and a stopped candidate over the requests it finished.
    A time limit, Ctrl-C or SIGTERM ends it early as a partial confirm (ConfirmInfo.stop), never losing a
    finished candidate."""
    from harness.advise.confirm_progress import display
    from harness.advise.confirm_rows import read_point

    cands = top(a, launch.k, launch.server_kind)
    if not cands:
        only = "; ".join(t.only for t in CONFIRM_TARGETS.values() if t.only)
        raise HarnessError(f"--confirm: no candidate runs on {launch.server_kind} ({only})")
    is_trace = trace is not None and trace.kind == "blocks"
    block = live_block(launch.server_kind, a.unit_tokens, launch.block_tokens) if is_trace else None
    bt = block.tokens if block is not None else SHRUNK_BLOCK
    sliced_from: list[int] = []
    sent = trace if is_trace else None  # the input as sent, in advice units: partial predictions
    scale = None
    with tempfile.TemporaryDirectory(prefix="advise-confirm-") as tmp:
        root = keep if keep is not None else Path(tmp)
        if launch.requests is not None and trace is not None:
            from harness.advise.confirm_slice import scaled_candidates, slice_file, slice_scale
            from harness.whatif.inputs import read_mooncake

            path = slice_file(path, launch.requests, root)
            sent = read_mooncake(path, a.unit_tokens)
            sliced_from = [c.config.pool for c in cands]
            scale = slice_scale(trace, sent, bt)
            cands = scaled_candidates(cands, trace, sent, profile, bt)
        live = live_spec(path, root, bt, a.unit_tokens, a.load if is_trace else None)
        est = _estimate(cands, sent, block, launch)
        span = _span(sent, a.load) if is_trace else 0.0
        if est.seconds is not None and span > est.seconds / len(cands):  # a trace's own times set the pace
            est = dataclasses.replace(
                est, seconds=span * len(cands), basis=f"the trace's {span:,.0f} s at {a.load.describe()}"
            )
        info = ConfirmInfo(launch.server_kind, est, block, scale, launch.time_limit_s)
        if scale is not None and sum(c.config.pool == scale.floor for c in cands) > 1:
            info.notes.append(
                f"{sum(c.config.pool == scale.floor for c in cands)} of {len(cands)} scaled pools are the slice's "
                f"floor ({scale.floor:,} blocks): the slice cannot tell those pools apart; a longer slice can."
            )
        if not launch.quiet:
            n = f", {len(sent.requests):,} requests each" if sent is not None else ""
            limit = (
                f"; stops at --confirm-time-limit {launch.time_limit_s:g} s" if launch.time_limit_s else ""
            )
            print(
                f"harness advise --confirm: {len(cands)} candidate(s) on {launch.server_kind}{n}, one server up "
                f"at a time: {info.estimate.line()}{limit}",
                file=sys.stderr,
            )
        run = plan_live(live, candidate_servers(live, cands, launch), launch, root / "cap")
        limit_t = TimeLimit(launch.time_limit_s)
        try:
            with display(launch.quiet) as shown, limit_t:
                run.run(shown.log if shown is not None else lambda _msg: None)
        except KeyboardInterrupt as e:
            info.stop = stop_of(e, limit_t)
        info.elapsed_s = limit_t.elapsed()
        with signals.held() as got:  # a stop now still gets what was measured written (exit 130)
            measured = [read_point(d) if d.is_dir() else None for d in run.dirs]
            whole = (
                sent if sent is not None else trace
            )  # an engine's block prediction: a spec's or capture's too
            rows = _rows(cands, measured, info, launch, (sent, whole), profile, live.unit_tokens, sliced_from)
            if is_trace and a.load is not None and sent is not None and profile is not None:
                _at_load(rows, cands, run.dirs, sent, a.load, profile, live.unit_tokens, launch)
        if (
            launch.capacity
            and not (info.stop or got)
            and is_trace
            and sent is not None
            and a.load is not None
        ):
            from harness.advise.confirm_capacity import confirm_capacity

            server = candidate_servers(live, cands[:1], launch)[0] | {"name": "capacity"}
            try:  # bench's search on the recommendation; a stop keeps the confirm that finished
                opts = _options(launch, root / "cap-capacity")
                info.capacity = confirm_capacity(a, launch, opts, sent, cands[0], live, server, profile)
            except KeyboardInterrupt as e:
                info.stop = stop_of(e, limit_t)
    if (
        info.stop is not None
        and info.stop.exit_code == EXIT_TIME_LIMIT
        and all(r["status"] == "ok" for r in rows)
    ):
        info.stop = None  # the limit fell as the last candidate finished: nothing was cut
    if got and info.stop is None:
        info.stop = stop_of(KeyboardInterrupt(f"signal {signal.Signals(got[0]).name}"), TimeLimit(None))
    return rows, info


def _rows(
    cands: list[Candidate],
    measured: list[Any],
    info: ConfirmInfo,
    launch: Launch,
    traces: tuple[Any, Any],
    profile: Any,
    live_unit: int,
    sliced_from: list[int],
) -> list[dict[str, Any]]:
    """Each candidate's row; an engine with its own KV block predicted at it, a stopped one's over the requests it finished."""
    from harness.advise.confirm_rows import predicted_over, row

    at_block = None
    page = 1
    sent, whole = traces  # the trace as sent in order (None: a spec or capture), and the input replayed
    block = CONFIRM_TARGETS[launch.server_kind].block
    if block is not None and whole is not None:
        at_block = block_predictions(cands, whole, profile, live_unit, block)
        page = block // live_unit if at_block is not None else 1
    out = []
    for i, (c, m) in enumerate(zip(cands, measured, strict=True)):
        p = at_block[i] if at_block is not None else c.hit_rate
        part = None
        if info.partial and m is not None and m.status != "ok":
            part = predicted_over(c, sent, m.indices, profile, page)
        r = row(c, launch.server_kind, p, m, info.partial, part)
        if sliced_from:
            r |= {
                "slice_requests": launch.requests,
                "pool": c.config.pool,
                "pool_scaled_from": sliced_from[i],
            }
        if at_block is not None:  # the page-1 figure of the candidates table, beside the block one
            r |= {"predicted_block_tokens": block, "predicted_hit_rate_page1": round(c.hit_rate, 6)}
        out.append(r)
    return out


def _at_load(
    rows: list[dict[str, Any]],
    cands: list[Candidate],
    dirs: list[Path],
    sent: Any,
    load: Any,
    profile: Any,
    live_unit: int,
    launch: Launch,
) -> None:
    """Each whole row gains TTFT and SLO attainment, predicted (the trace as sent, replayed at the load)
    beside measured, and the hit rate predicted at that load (harness.advise.confirm_load)."""
    from harness.advise.confirm_load import live_trace, measured, predicted, row_fields

    todo = [i for i, r in enumerate(rows) if r["status"] == "ok" and "predicted_block_tokens" not in r]
    if not todo:
        return
    trace = live_trace(sent, live_unit)
    pred = predicted(trace, [cands[i].config for i in todo], load, profile, launch.slo, live_unit)
    for i, p in zip(todo, pred, strict=True):
        r = rows[i]
        m = measured(dirs[i], launch.slo)
        if p.hit_rate is not None:
            r["predicted_hit_rate_one_at_a_time"] = r["predicted_hit_rate"]
            r["predicted_hit_rate"] = round(p.hit_rate, 6)
            if r["measured_hit_rate"] is not None:
                r["difference_points"] = round((r["measured_hit_rate"] - p.hit_rate) * 100, 3)
        r |= {"load": load.describe()} | row_fields(p, m)


def _span(sent: Any, load: Any) -> float:
    """Wall seconds a trace sent at its own times takes at least: its first to last arrival / --speedup."""
    if sent is None or load is None or load.kind != "trace" or not sent.requests:
        return 0.0
    arrivals = [r.arrival for r in sent.requests]
    return (max(arrivals) - min(arrivals)) / load.speedup


def _estimate(cands: list[Candidate], sent: Any, block: LiveBlock | None, launch: Launch) -> Estimate:
    """The estimate from the traffic as sent live: requests, answer tokens (shrunk with the blocks), and
    one candidate's modelled service time."""
    if sent is None:
        return estimate(launch.server_kind, len(cands), None, 0, 0.0)
    shrink = block.tokens / block.trace_block if block is not None and block.shrunk else 1.0
    answers = sum(max(1, math.ceil(r.output_tokens * shrink)) for r in sent.requests)
    rps = cands[0].modelled.throughput_rps
    modelled = len(sent.requests) / rps if rps else 0.0
    return estimate(launch.server_kind, len(cands), len(sent.requests), answers, modelled)
