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


def test_a_stop_that_an_import_turned_into_an_import_error_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI's signal stress: a SIGTERM 2 s into `harness bench` landed inside an extension module's import,
    which raised `ImportError: initialization failed` from the KeyboardInterrupt: exit 1, a traceback."""

    def import_hit_by_a_stop(*_a: object, **_k: object) -> None:
        try:
            raise KeyboardInterrupt("signal SIGTERM")
        except KeyboardInterrupt as stop:
            raise ImportError("initialization failed") from stop

    monkeypatch.setattr(cli.importlib, "import_module", import_hit_by_a_stop)
    assert cli.main(["bench", "--help"]) == 130
    assert capsys.readouterr().err.strip() == "harness bench: interrupted"


def test_an_import_error_of_its_own_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise ImportError("no module named x")

    monkeypatch.setattr(cli.importlib, "import_module", broken)
    with pytest.raises(ImportError, match="no module named x"):
        cli.main(["bench", "--help"])
