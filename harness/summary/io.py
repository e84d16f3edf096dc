"""Reading and writing `summaries/<node>.json` through the types of harness.summary.model.

Schema 2 adds the top-level `verdict` (the verdict line, computed once by summarize); schema 1 files
(docs/sample/cpu-sim.json) read into the same types with `verdict` unset, and harness.verdicts fills
it in when a reader needs it. Bad input is one HarnessError line naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.capture.files import write_json_atomic
from harness.errors import HarnessError
from harness.summary.model import Summary
from harness.summary.record import READ_FILE

SCHEMA_VERSION = 2
READABLE_MAJORS = (1, 2)  # 1: before the types (no `verdict`); 2: written through them


def schema_major(version: Any) -> int | None:
    """The major of a schema_version (`2`, `"1.2"`); None when it is not a version."""
    major = str(version).split(".", 1)[0]
    return int(major) if major.isdigit() else None


def _check_shape(data: Any, source: str) -> None:
    """The checks whose wording readers rely on, before the types say the rest."""
    if not isinstance(data, dict) or "points" not in data or "schema_version" not in data:
        raise HarnessError(
            f"{source}: not a summary (expected top-level schema_version and points; "
            "run `harness summarize` first)"
        )
    version = data["schema_version"]
    if schema_major(version) not in READABLE_MAJORS:
        raise HarnessError(
            f"{source}: schema_version {version!r} is not supported "
            f"(expected {' or '.join(f'{m}.x' for m in READABLE_MAJORS)})"
        )
    points = data["points"]
    if not isinstance(points, list):
        raise HarnessError(f"{source}: points: expected a list, got {type(points).__name__}")
    for i, p in enumerate(points):
        if not isinstance(p, dict):
            raise HarnessError(f"{source}: points[{i}]: expected an object, got {type(p).__name__}")
        for key in ("experiment", "server"):
            if key not in p:
                raise HarnessError(f"{source}: points[{i}]: missing key {key!r}")
        tel = p.get("telemetry")
        if tel is not None and not isinstance(tel, dict):
            raise HarnessError(
                f"{source}: points[{i}].telemetry: expected an object or null, got {type(tel).__name__}"
            )


def _where(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location as the key path a person reads: points[3].verdict.flagged."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("int", "float", "str", "bool", "list", "dict") or "[" in str(part):
            continue  # the union member pydantic tried, not a key
        else:
            out += f".{part}" if out else str(part)
    return out


def parse_summary(data: Any, source: str = "summary") -> Summary:
    """A summary object (schema 1 or 2) → Summary; one HarnessError line on anything else."""
    if isinstance(data, Summary):
        return data
    _check_shape(data, source)
    try:
        return Summary.model_validate(data, context=READ_FILE)
    except ValidationError as e:
        err = e.errors()[0]
        raise HarnessError(
            f"{source}: {_where(err['loc'])}: {err['msg']} (got {err.get('input')!r:.60})"
        ) from None


def load_summary(path: Path | str) -> Summary:
    """Read summaries/<node>.json; a missing, unreadable or wrong-shaped file is one line (exit 2)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such summary file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HarnessError(f"{path}: not a summary (unreadable: {e})") from None
    except json.JSONDecodeError as e:
        raise HarnessError(
            f"{path}: not a summary (not JSON: line {e.lineno} column {e.colno}: {e.msg})"
        ) from None
    return parse_summary(data, str(path))


def write_summary(summary: Summary, path: Path) -> Path:
    """The summary as JSON, atomically (a reader never sees half a file)."""
    write_json_atomic(path, summary.to_json())
    return path
