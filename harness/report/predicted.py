"""The report's "Predicted vs measured" table: the what-if replay beside the server's hit rate (issue 14)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.common import as_points, point_order
from harness.summary import Point


def _pct(v: Any) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"


def prediction_table(points: Iterable[Point | Mapping[str, Any]]) -> list[str]:
    """One row per point that has a prediction (or says why not); empty when no point was predicted."""
    rows = []
    for p in sorted(as_points(points), key=point_order):
        pr = p.prediction
        if pr is None:
            continue
        diff = pr.diff_points
        flag = f"⚠ over {pr.flag_points if 'flag_points' in pr else 3:g} points" if pr.flag else ""
        if p.predicted_hit_rate is None:
            flag = f"no prediction: {pr.why_none or 'n/a'}"
        pc = p.prompt_check
        if pc is not None and pc.differ:
            flag += f"{'; ' if flag else ''}{pc.differ} of {pc.checked} prompts not as built"
        rows.append(
            [
                p.server,
                p.point_key,
                _pct(p.measured_hit_rate),
                _pct(p.predicted_hit_rate),
                f"{diff:+.2f}" if isinstance(diff, int | float) else "n/a",
                _pct(p.ideal_hit_rate),
                flag,
            ]
        )
    if not rows or all(r[3] == "n/a" for r in rows):
        return []
    header = ["server", "point", "measured", "predicted (what-if)", "difference (points)", "ideal", "flag"]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]
