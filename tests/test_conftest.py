"""The test run's own plumbing: the PostgreSQL probe and the summary of skipped groups."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import skip_summary


def _skipped(reason: str, *keywords: str) -> SimpleNamespace:
    return SimpleNamespace(
        longrepr=("tests/x.py", 1, f"Skipped: {reason}"), keywords=dict.fromkeys(keywords, 1)
    )


def test_skips_are_grouped_with_the_command_that_enables_them() -> None:
    reports = [
        _skipped("PostgreSQL: $TUNEFARM_TEST_PG_URL is unset and ...", "postgres", "any_url"),
        _skipped("PostgreSQL: $TUNEFARM_TEST_PG_URL is unset and ...", "postgres"),
        _skipped("qemu/cross toolchain cannot be installed here: apt-get failed"),
        _skipped("no CUDA GPU on this machine", "gpu"),
        _skipped("nvcc is not installed"),
        _skipped("could not import 'onnx': No module named 'onnx'"),
        _skipped("a PostgreSQL role"),  # the SQLite case of a PostgreSQL-only test
        SimpleNamespace(longrepr=("tests/y.py", 3, "Skipped: server-side connection drop")),
    ]
    lines = skip_summary(reports)
    assert [line.split(":", 1)[0] for line in lines] == [
        "postgres (2 tests skipped)",
        "arm/qemu (1 test skipped)",
        "gpu (2 tests skipped)",
        "frontends (1 test skipped)",
        "other",
        "other",
    ]
    assert "pg_ctlcluster" in lines[0] and "export TUNEFARM_TEST_PG_URL=" in lines[0]
    assert "apt-get install qemu-user-static gcc-aarch64-linux-gnu" in lines[1]
    assert "pip install" in lines[3]
    assert lines[4] == "other: a PostgreSQL role (1 test skipped): nothing to enable"
    assert skip_summary([]) == []


def test_postgres_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = conftest.pg_probe.__wrapped__  # uncached
    monkeypatch.setenv("TUNEFARM_TEST_PG_URL", "postgresql://me@db.example/x")
    assert probe() == ("postgresql://me@db.example/x", "$TUNEFARM_TEST_PG_URL")
    monkeypatch.delenv("TUNEFARM_TEST_PG_URL")
    monkeypatch.setattr(conftest, "PG_DEFAULT_URL", "postgresql://postgres@127.0.0.1:1/test")
    url, why = probe()
    assert url is None and "127.0.0.1:1/test does not answer" in why
