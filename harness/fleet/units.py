"""Fleet units: one (node group, server profile) each, with the points it owes and the ones already back.

A unit is one `harness bench --server NAME` on one node; splitting by profile lets two nodes of a group
work in parallel and a lost node cost one profile's points. The resume decision reads the driver's
capture: a unit whose every planned point has a point.json that says ok is not sent again. A spec with
`search:` owes no fixed points: its probes are chosen as the search goes (inside the node's bench, as
harness.sweep.search runs them), so the unit owes "the search", done when the capture's probes end it.
"""

from __future__ import annotations

import fnmatch
import glob
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.capture import MANIFEST, experiment_dir, point_name, server_dir
from harness.capture.manifest import check_same_spec, load_manifest
from harness.capture.points import is_done, read_point
from harness.errors import SpecError
from harness.fleet.config import FleetFile, NodeGroup
from harness.spec import ExperimentSpec
from harness.sweep.plan import load_specs


@dataclass
class Unit:
    group: NodeGroup
    server: str  # the profile's name after matrix expansion
    specs: list[ExperimentSpec]  # the group's specs that hold this profile
    points: list[tuple[str, str]]  # (experiment, point name) in sweep order; none for a search spec
    searches: list[ExperimentSpec] = field(default_factory=list)  # the specs with `search:`

    @property
    def key(self) -> str:
        return f"{self.group.name}/{self.server}"

    def server_glob(self) -> str:
        """The `--server` pattern that matches exactly this profile's name."""
        return glob.escape(self.server)

    def ok_points(self, capture: Path) -> int:
        return sum(
            is_done(read_point(server_dir(capture, self.group.name, exp, self.server) / p))
            for exp, p in self.points
        )

    def searches_done(self, capture: Path) -> int:
        """Searches whose probes in the capture are all ok and leave no next value to probe."""
        from harness.sweep.search import probe_values

        return sum(probe_values(s, capture, self.group.name, self.server)[1] is None for s in self.searches)

    def complete(self, capture: Path) -> bool:
        return self.ok_points(capture) == len(self.points) and self.searches_done(capture) == len(
            self.searches
        )

    def progress(self, capture: Path) -> str:
        """What is back so far, in words: "3/4 points ok", "search: 0/1 done" or both."""
        return progress_text(
            self.ok_points(capture), len(self.points), self.searches_done(capture), len(self.searches)
        )

    def seed_tar(self, capture: Path) -> bytes:
        """What the driver already holds of this unit (manifests, the server's folders), for the remote bench."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for spec in self.specs:
                edir = experiment_dir(capture, self.group.name, spec.name)
                rel = Path(self.group.name) / spec.name
                if (edir / MANIFEST).is_file():
                    tar.add(edir / MANIFEST, arcname=str(rel / MANIFEST))
                sdir = edir / self.server
                if sdir.is_dir():
                    tar.add(sdir, arcname=str(rel / self.server))
            log = capture / self.group.name / "fleet-logs" / f"{self.server}.log"
            if log.is_file():
                tar.add(log, arcname=f"{self.group.name}/fleet-logs/{self.server}.log")
        return buf.getvalue()


def plan_units(fleet: FleetFile) -> list[Unit]:
    """Every (group, profile) unit in file order; specs are loaded and checked here, on the driver."""
    units: list[Unit] = []
    for gi, group in enumerate(fleet.nodes):
        specs = load_specs(list(group.specs))
        by_server: dict[str, list[ExperimentSpec]] = {}
        for spec in specs:
            for prof in spec.server_profiles():
                if group.servers and not any(fnmatch.fnmatchcase(prof.name, pat) for pat in group.servers):
                    continue
                by_server.setdefault(prof.name, []).append(spec)
            edir = experiment_dir(fleet.capture, group.name, spec.name)
            check_same_spec(spec, edir, load_manifest(edir))
        if not by_server:
            raise SpecError(
                str(fleet.path),
                f"nodes[{gi}].servers",
                f"no server profile of the group's specs matches {list(group.servers)}",
            )
        for server, sspecs in by_server.items():
            points = [
                (spec.name, point_name(p.sweep, seed))
                for spec in sspecs
                if spec.search is None
                for p in spec.points()
                for seed in spec.seeds
            ]
            searches = [s for s in sspecs if s.search is not None]
            units.append(Unit(group, server, sspecs, points, searches))
    return units


def progress_text(points_ok: int, points_total: int, searches_done: int, searches_total: int) -> str:
    """ "3/4 points ok", "search: 1/1 done", or both joined: a search has no point count until it ends."""
    parts = [f"{points_ok}/{points_total} points ok"] if points_total or not searches_total else []
    if searches_total:
        parts.append(f"search: {searches_done}/{searches_total} done")
    return ", ".join(parts)
