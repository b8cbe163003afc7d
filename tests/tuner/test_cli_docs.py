"""docs/cli.md is the typer app's reference as it is now (``make docs-cli`` regenerates it)."""

from __future__ import annotations

from pathlib import Path

from tuner.cli.docgen import DOC, main, render


def test_cli_reference_is_current() -> None:
    assert DOC.read_text() == render(), "docs/cli.md is stale: run `make docs-cli`"


def test_every_command_and_option_is_in_the_reference() -> None:
    text = render()
    for heading in (
        "## `tunefarm tune`",
        "### `tunefarm db list`",
        "### `tunefarm profile record`",
    ):
        assert heading in text
    assert "| `--json` | Print the result as JSON on stdout. |" in text
    assert "`-o, --output <path>`" in text and "<bool>" not in text


def test_check_fails_on_a_stale_copy(tmp_path: Path) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text(render().replace("--trials", "--budget", 1))
    assert main(["--check", "--output", str(stale)]) == 1
    assert main(["--output", str(stale)]) == 0
    assert main(["--check", "--output", str(stale)]) == 0
