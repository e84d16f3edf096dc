"""`--confirm K`: launch the top K candidates on the sim, send the same traffic, put measured beside
predicted.

Each candidate becomes a `launch: sim` server profile (harness.servers.process.ServerProcess starts it
on a free loopback port and stops its process group) and the input spec runs against it through
harness.sweep.bench.run_points, as `harness run` would; the measured hit rate is the cached tokens the
server reported over the prompt tokens, from the capture's requests.jsonl. Spec inputs only: a spec is
what the load generator can send (a Mooncake trace has no text; wrap it in a `workload: {kind: trace}`
spec).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from harness.advise.advice import Advice
from harness.advise.grid import Candidate
from harness.errors import HarnessError

TIME_SCALE = 0.02  # modelled seconds per wall second x 50: the lockstep header keeps the order exact


def check_confirm(inputs: list[Path], k: int) -> None:
    for p in inputs:
        if p.suffix not in (".yaml", ".yml"):
            raise HarnessError(f"--confirm {k}: {p}: needs an experiment spec (.yaml) to send live")


def top(a: Advice, k: int) -> list[Candidate]:
    """The K best by hit rate, the recommended configuration first."""
    rest = sorted(a.candidates, key=lambda c: (-round(c.hit_rate, 4), c.modelled.ttft_ms["mean"]))
    chosen = a.recommendation.chosen
    return [chosen, *[c for c in rest if c is not chosen]][:k]


def sim_args(c: Candidate, card: str, model: str | None) -> list[str]:
    cfg = c.config
    args = ["--card-profile", card, "--time-scale", str(TIME_SCALE), "--enable-cache-report"]
    args += ["--max-total-tokens", str(cfg.pool), "--radix-eviction-policy", cfg.policy]
    if cfg.policy_config:
        args += ["--radix-eviction-policy-config", json.dumps(dict(cfg.policy_config))]
    if cfg.host_ratio > 0:
        args += ["--enable-hierarchical-cache", "--hicache-ratio", f"{cfg.host_ratio:g}"]
        args += ["--hicache-write-policy", cfg.write_policy]
    if model:
        args += ["--model-path", model]
    return args


def measure(spec_path: Path, c: Candidate, card: str, model: str | None, work: Path) -> float:
    from harness.capture import read_jsonl
    from harness.servers.process import ServerProcess
    from harness.spec import load_spec
    from harness.spec.servers import ServerProfile
    from harness.sweep.bench import run_points

    spec = load_spec(spec_path)
    profile = ServerProfile(name="advise-sim", launch="sim", args=tuple(sim_args(c, card, model)))
    server = ServerProcess(profile, work / "server")
    (work / "server").mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        cap = work / "cap"
        rec = run_points(
            spec, base_url=server.base_url, server_name="sim", node="n", capture_root=cap, seeds=[0]
        )[0]
        status = rec.status if hasattr(rec, "status") else rec.get("status")
        if status != "ok":
            raise HarnessError(f"--confirm: {c.label()}: the live run ended {status}")
        point = next((cap / "n" / spec.name / "sim").glob("**/requests.jsonl"))
        rows, _bad = read_jsonl(point)
    finally:
        server.stop()
    prompt = sum(r.get("prompt_tokens") or 0 for r in rows)
    cached = sum(r.get("cached_tokens") or 0 for r in rows)
    return cached / prompt if prompt else 0.0


def confirm(
    spec_path: Path, a: Advice, k: int, card: str, model: str | None, keep: Path | None = None
) -> list[dict]:
    """`keep`: the folder for each candidate's server log and capture (kept, as a run's are); else a
    temporary one."""
    out = []
    with tempfile.TemporaryDirectory(prefix="advise-confirm-") as tmp:
        root = keep if keep is not None else Path(tmp)
        for i, c in enumerate(top(a, k)):
            measured = measure(spec_path, c, card, model, root / f"candidate-{i + 1}")
            out.append(
                {
                    "config": c.label(),
                    "predicted_hit_rate": round(c.hit_rate, 6),
                    "measured_hit_rate": round(measured, 6),
                    "difference_points": round((measured - c.hit_rate) * 100, 3),
                }
            )
    return out
