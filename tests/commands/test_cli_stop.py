"""A Ctrl-C at any moment of the `harness` command is a stop (exit 130, one line), never a traceback."""

from __future__ import annotations

import pytest

from harness import cli


@pytest.mark.parametrize("where", ["_top_parser", "import_module"])
def test_a_ctrl_c_before_the_command_runs_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """CI's signal stress landed a SIGINT 0.19 s into `harness run`, while the top parser was built,
    outside main's try: the process died of the signal (exit -2) with a traceback."""

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    target = cli.importlib if where == "import_module" else cli
    monkeypatch.setattr(target, where, interrupted)
    assert cli.main(["run", "--help"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == ("harness: interrupted" if where == "_top_parser" else "harness run: interrupted")
