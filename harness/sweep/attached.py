"""A server someone else started (`harness run`): the sweep's stand-in for a launched one, and its info.

It is always taken to be up and never restarted; its cache settings are read from its info endpoint, so its
points get predicted vs measured as a launched SGLang's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.capture.redact import spec_redactor
from harness.servers.control import RESET_PATHS
from harness.servers.process import ServerError
from harness.spec import ExperimentSpec


@dataclass
class Attached:
    """A server someone else started (`harness run`): always taken to be up, never restarted."""

    base_url: str
    returncode: int | None = None

    def alive(self) -> bool:
        return True

    def restart(self) -> None:
        raise ServerError(f"{self.base_url}: an attached server is not restarted by the harness")

    def quoted_tail(self) -> str:
        return "(the attached server's log is not ours)"

    fresh = False  # someone else's server: what it holds is not known
    settle_s = 0.0
    reset_paths = RESET_PATHS  # SGLang's, then vLLM's
    points_run = 0


ATTACHED_INFO_PATHS = (
    "/server_info",
    "/get_server_info",
)  # SGLang 0.5.23's name first; the old one logs a warning


def save_attached_info(spec: ExperimentSpec, base_url: str, sdir: Path) -> None:
    """An attached SGLang's cache settings, saved as a launched server's are, so its points get predicted vs
    measured; a server without the endpoint (vLLM, llama.cpp) simply has none."""
    from harness.capture import SERVER_INFO, write_json_atomic
    from harness.servers.control import fetch_server_info

    info = fetch_server_info(base_url, ATTACHED_INFO_PATHS, spec.resolved_headers())
    if info is not None:
        sdir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(sdir / SERVER_INFO, spec_redactor([spec]).obj(info))
