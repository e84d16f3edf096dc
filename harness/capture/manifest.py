"""manifest.json: the one writer (everything through the redactor), fingerprints, and the same-spec check.

`harness bench` and `harness run` both write an experiment's manifest here: identity keys are rewritten
on every run, keys others added (servers, bench settings, host facts) are kept, the first start time
stays. A capture folder only ever holds points measured under one version of a spec.
"""

from __future__ import annotations

import hashlib
import json
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import __version__
from harness.capture.files import MANIFEST, POINT, read_json_dict, write_json_atomic
from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.capture.redact import Redactor
    from harness.spec import ExperimentSpec

# The fingerprint covers what makes points comparable (new seeds, sweep values, timeouts or servers are
# fine; a changed workload, model or concurrency is not). `harness run` and `harness bench` both check it.
FINGERPRINT_KEYS = ("api", "model", "tokenizer", "concurrency", "workload", "request_rate")


def load_manifest(edir: Path) -> dict[str, Any]:
    """An experiment's manifest.json, or {} when missing or unreadable."""
    return read_json_dict(Path(edir) / MANIFEST) or {}


def fingerprint(obj: Any) -> str:
    """A short, stable hash of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def spec_fingerprint(spec: ExperimentSpec) -> str:
    """A short hash of the spec settings that decide what a point measures."""
    return fingerprint({k: spec.raw.get(k) for k in FINGERPRINT_KEYS})


def check_same_spec(spec: ExperimentSpec, edir: Path, manifest: dict[str, Any]) -> None:
    """Refuse to resume into a capture whose points were measured under another version of the spec."""
    # both `run` and `bench` write the top-level key on every run; older bench manifests kept it under bench
    old = manifest.get("spec_fingerprint") or (manifest.get("bench") or {}).get("spec_fingerprint")
    if old in (None, spec_fingerprint(spec)) or not any(Path(edir).glob(f"*/*/{POINT}")):
        return
    raise HarnessError(
        f"{edir}: holds points of a different version of {spec.source_path} (workload or client "
        "settings changed); use another --capture or --node, or remove that folder"
    )


def git_sha() -> str | None:
    """The harness checkout's commit, for manifests (None outside a git checkout)."""
    try:
        r = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def write_manifest(
    edir: Path, spec: ExperimentSpec, node: str, redactor: Redactor, fields: dict[str, Any] | None = None
) -> Path:
    """Create or update manifest.json; every value passes the redactor before it touches the disk.

    Refuses (HarnessError) when the folder holds points of another version of the spec. `fields`
    replace the keys they name; keys of earlier runs that are not named are kept.
    """
    manifest = load_manifest(edir)
    check_same_spec(spec, edir, manifest)
    now = time.time()
    manifest.update(
        {
            "experiment": spec.name,
            "spec_path": str(spec.source_path) if spec.source_path else None,
            "spec": spec.redacted_raw(),
            "spec_fingerprint": spec_fingerprint(spec),
            "harness_version": __version__,
            "git_sha": git_sha(),
            "host": socket.gethostname(),
            "node": node,
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            **(fields or {}),
        }
    )
    manifest.setdefault("start_wall", now)
    manifest.setdefault("start_time", time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)))
    manifest["last_run_wall"] = now
    path = Path(edir) / MANIFEST
    write_json_atomic(path, redactor.obj(manifest))
    return path


def record_server(edir: Path, name: str, **fields: Any) -> None:
    """Add what a started server told us (version, pid) to its entry; nothing when there is no manifest yet."""
    manifest = load_manifest(edir)
    if not manifest:
        return
    manifest.setdefault("servers", {}).setdefault(name, {}).update(fields)
    write_json_atomic(Path(edir) / MANIFEST, manifest)
