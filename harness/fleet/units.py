"""Fleet units: one (node group, server profile) each, with the points it owes and the ones already back.

A unit is one `harness bench --server NAME` on one node; splitting by profile lets two nodes of a group
work in parallel and a lost node cost one profile's points. The resume decision reads the driver's
capture: a unit whose every planned point has a point.json that says ok is not sent again.
"""

from __future__ import annotations

import fnmatch
import glob
import io
import tarfile
from dataclasses import dataclass
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
    points: list[tuple[str, str]]  # (experiment, point name) in sweep order

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

    def complete(self, capture: Path) -> bool:
        return self.ok_points(capture) == len(self.points)

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
                for p in spec.points()
                for seed in spec.seeds
            ]
            units.append(Unit(group, server, sspecs, points))
    return units
