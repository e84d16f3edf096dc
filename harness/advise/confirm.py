"""`--confirm K`: launch the top K candidates as `harness bench` would, send the same traffic, and put the
measured hit rate beside the predicted one.

Each candidate becomes one `launch: sglang` server profile carrying its SGLang flags (pool, eviction
policy, HiCache ratio and write policy, storage backend); `harness.sweep.plan` resolves it for the server
kind (`sim`, `sglang`, `sglang-cpu`: SGLang's own server on this CPU, or another engine: harness.engines.confirm) exactly as `bench
--server-kind` does, and `harness.sweep.bench.run_plans` starts it, runs the input's first point with its
seed and stops it. The traffic is the input's own: a spec as written; a capture point its manifest's spec
at the point's sweep values and seed; a Mooncake trace a `workload: {kind: trace}` spec over the file
(harness.advise.live_spec). Measured = the cached tokens the server reported over the prompt tokens, from
the point's requests.jsonl.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.advise.advice import Advice
from harness.advise.better import ranked
from harness.advise.grid import Candidate
from harness.advise.live_spec import LiveSpec, live_spec
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
    block_tokens: int = 16  # Mooncake traces: tokens per hash id sent live
    requests: int | None = None  # --confirm-requests: a slice of the trace (harness.advise.confirm_slice)


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
    if launch.block_tokens <= 0:
        raise HarnessError(f"--live-block-tokens: {launch.block_tokens} must be positive")
    if launch.k and CONFIRM_TARGETS[launch.server_kind].loads_model and not launch.model:
        raise HarnessError(
            f"--server-model: --server-kind {launch.server_kind} loads a model: name its folder "
            "(--server-model PATH, or --model PATH)"
        )
    if launch.k:
        for p in inputs:
            if p.is_dir():  # a capture: its manifest's spec, and the files that spec names
                live_spec(p, p, launch.block_tokens, 1)
    m = launch.model
    if (
        m
        and launch.server_kind != "sim"
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
    """A what-if configuration as server flags (see server_args)."""
    tokens = cfg.pool * unit_tokens
    target = CONFIRM_TARGETS.get(server_kind)
    if target is not None and target.pool_args is not None:
        return target.pool_args(tokens)
    args = ["--enable-cache-report", "--max-total-tokens", str(tokens), "--radix-eviction-policy", cfg.policy]
    if cfg.policy_config:
        args += ["--radix-eviction-policy-config", json.dumps(dict(cfg.policy_config))]
    if cfg.host_ratio > 0:
        args += ["--enable-hierarchical-cache", "--hicache-ratio", f"{cfg.host_ratio:g}"]
        args += ["--hicache-write-policy", cfg.write_policy]
        if cfg.storage:
            args += ["--hicache-storage-backend", cfg.storage]
    return args


def _options(launch: Launch, capture: Path) -> Any:
    from harness.sweep.plan import BenchOptions

    python = launch.sglang_python
    if launch.server_kind == "sglang-cpu":
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
        quiet=not sys.stderr.isatty(),  # a terminal sees each candidate's bar (requests done of total)
        argv=["harness", "advise", "--confirm", str(launch.k)],
    )


def run_candidates(live: LiveSpec, cands: list[Candidate], launch: Launch, work: Path) -> list[float | None]:
    """Every candidate's server up in turn for the live point; the measured hit rate of each (None: its
    run did not end ok)."""
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
    out: list[float | None] = []
    for pdir in run_live_point(live, servers, launch, work / "cap"):
        out.append(measured_hit_rate(pdir) if pdir is not None else None)
    return out


def run_live_point(
    live: LiveSpec, servers: list[dict[str, Any]], launch: Launch, capture: Path
) -> list[Path | None]:
    """Each server profile up in turn for the live spec's one point (single servers or `replicas:` fleets);
    the point folder of each, None where its run did not end ok."""
    from harness.capture import point_dir
    from harness.capture.redact import spec_redactor
    from harness.sweep.bench import run_plans
    from harness.sweep.plan import plan_experiment

    spec = dataclasses.replace(live.spec, servers_raw=servers, matrix_raw=None, seeds=[live.seed])
    opts = _options(launch, capture)
    plan = plan_experiment(spec, opts)
    for sp in plan.servers:
        sp.points = [p for p in sp.points if p.point.sweep == live.point.sweep][:1]
        if launch.server_kind == "sim" and launch.model:
            sp.model = launch.model
    outcome = run_plans([plan], opts, spec_redactor([spec]), lambda _msg: None)
    if outcome.server_failures:
        raise HarnessError(f"--confirm: {outcome.server_failures[0]}")
    out: list[Path | None] = []
    for sp in plan.servers:
        item = sp.points[0]
        ok = outcome.statuses.get(f"{spec.name}/{sp.profile.name}/{item.name}") == "ok"
        out.append(point_dir(opts.capture, opts.node, spec.name, sp.profile.name, item.name) if ok else None)
    return out


def measured_hit_rate(pdir: Path) -> float:
    """Cached over prompt tokens of the requests the server answered (warm-up left out)."""
    from harness.capture import REQUESTS, read_jsonl

    rows, _bad = read_jsonl(pdir / REQUESTS)
    rows = [r for r in rows if not r.get("warmup")]
    prompt = sum(r.get("prompt_tokens") or 0 for r in rows)
    cached = sum(r.get("cached_tokens") or 0 for r in rows)
    return cached / prompt if prompt else 0.0


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
) -> list[dict]:
    """`keep`: the folder for the servers' logs and the captures (kept, as a run's are); else a temporary
    one. `trace`, `profile`: the advice's input and physics, to predict an engine at its block size."""
    cands = top(a, launch.k, launch.server_kind)
    if not cands:
        only = "; ".join(t.only for t in CONFIRM_TARGETS.values() if t.only)
        raise HarnessError(f"--confirm: no candidate runs on {launch.server_kind} ({only})")
    sliced_from: list[int] = []
    with tempfile.TemporaryDirectory(prefix="advise-confirm-") as tmp:
        root = keep if keep is not None else Path(tmp)
        if launch.requests is not None and trace is not None:
            from harness.advise.confirm_slice import scaled_candidates, slice_file
            from harness.whatif.inputs import read_mooncake

            path = slice_file(path, launch.requests, root)
            part = read_mooncake(path, a.unit_tokens)
            sliced_from = [c.config.pool for c in cands]
            cands = scaled_candidates(cands, trace, part, profile, launch.block_tokens)
        live = live_spec(path, root, launch.block_tokens, a.unit_tokens)
        n = (
            sum(1 for line in path.open() if line.strip())
            if path.is_file() and path.suffix == ".jsonl"
            else None
        )
        print(
            f"harness advise --confirm: {len(cands)} candidate(s) on {launch.server_kind}"
            + (f", {n:,} requests each" if n else "")
            + " (one server up at a time)"
            + _estimate(cands, n, launch.server_kind),
            file=sys.stderr,
        )
        measured = run_candidates(live, cands, launch, root)
    predicted = [c.hit_rate for c in cands]
    at_block = None
    block = CONFIRM_TARGETS[launch.server_kind].block
    if block is not None and trace is not None:
        at_block = block_predictions(cands, trace, profile, live.unit_tokens, block)
    out = []
    for i, (c, m) in enumerate(zip(cands, measured, strict=True)):
        p = at_block[i] if at_block is not None else predicted[i]
        row = {
            "config": c.label(),
            "server_kind": launch.server_kind,
            "predicted_hit_rate": round(p, 6),
            "measured_hit_rate": None if m is None else round(m, 6),
            "difference_points": None if m is None else round((m - p) * 100, 3),
        }
        if sliced_from:
            row |= {
                "slice_requests": launch.requests,
                "pool": c.config.pool,
                "pool_scaled_from": sliced_from[i],
            }
        if at_block is not None:  # the page-1 figure of the candidates table, beside the block one
            row |= {"predicted_block_tokens": block, "predicted_hit_rate_page1": round(c.hit_rate, 6)}
        out.append(row)
    return out


def _estimate(cands: list[Candidate], n: int | None, server_kind: str) -> str:
    """On the sim: the modelled service time of the requests at its time scale, plus a start a server."""
    if not n or server_kind != "sim":
        return ""
    secs = sum(n / c.modelled.throughput_rps * TIME_SCALE + 5.0 for c in cands if c.modelled.throughput_rps)
    return f"; about {secs / 60:.1f} min on the sim" if secs else ""
