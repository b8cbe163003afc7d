"""Assertions shared by the CLI tests."""

from __future__ import annotations

from typing import Any


def one_line_error(result: Any, needle: str) -> None:
    """A CLI result that failed with exit code 1 and one ``error: ...`` line naming ``needle``."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]
    assert "Traceback" not in result.output
