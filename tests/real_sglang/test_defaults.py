"""Every SGLang flag the sim declares has SGLang 0.5.23's own default, read from SGLang's argument
definitions in its CPU venv (ServerArgs.add_cli_args): same default, same switch-or-value form, and no
choice SGLang's parser would refuse beyond the ones docs/sglang-facts.md lists with the reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.real_sglang.conftest import REPO

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(600)]
HERE = Path(__file__).resolve().parent
SIM_ONLY_GROUPS = ("sim-only", "faults (see below)")
# choices the sim takes that 0.5.23's parser refuses: older policies its tree still implements
EXTRA_CHOICES = {"--radix-eviction-policy": {"fifo", "mru", "filo"}}


def _sglang_args(python: Path) -> dict[str, dict]:
    r = subprocess.run(
        [str(python), str(HERE / "argdefaults.py")], capture_output=True, text=True, timeout=300
    )
    assert "__ARGS__" in r.stdout, r.stderr[-3000:]
    return json.loads(r.stdout.rsplit("__ARGS__", 1)[1])


def _sim_flags() -> dict[str, tuple[object, tuple[str, ...] | None, bool]]:
    """The sim's SGLang flags (not its sim-only and fault groups): option -> (default, choices, switch)."""
    from harness.sim.args import build_parser

    parser = build_parser()
    own = {a.dest for g in parser._action_groups if g.title in SIM_ONLY_GROUPS for a in g._group_actions}
    out = {}
    for a in parser._actions:
        if a.dest in own or a.dest == "help":
            continue
        for option in a.option_strings:
            if option.startswith("--"):
                out[option] = (a.default, tuple(a.choices) if a.choices else None, a.nargs == 0)
    return out


def test_every_sim_flag_has_sglangs_own_default(sglang_setup) -> None:
    sglang = _sglang_args(sglang_setup.python)
    # the reader reads what it should: SGLang's parser, with defaults the sim's docs cite
    assert len(sglang) > 300 and sglang["--max-prefill-tokens"]["default"] == 16384
    sim = _sim_flags()
    assert len(sim) >= 30
    unknown = sorted(set(sim) - set(sglang))
    assert unknown == [], f"sim flags 0.5.23 does not have: {unknown}"
    differ = {
        flag: (default, sglang[flag]["default"])
        for flag, (default, _, _) in sim.items()
        if default != sglang[flag]["default"]
    }
    assert differ == {}, f"sim default vs SGLang 0.5.23's: {differ}"
    form = {flag for flag, (_, _, switch) in sim.items() if switch != sglang[flag]["switch"]}
    assert form == set(), f"a switch in one, a valued flag in the other: {sorted(form)}"
    extra = {
        flag: set(choices) - set(sglang[flag]["choices"] or choices) - EXTRA_CHOICES.get(flag, set())
        for flag, (_, choices, _) in sim.items()
        if choices
    }
    assert {f: c for f, c in extra.items() if c} == {}
    facts = (REPO / "docs" / "sglang-facts.md").read_text()
    for flag, choices in EXTRA_CHOICES.items():
        assert all(c in facts for c in choices) and flag in facts
