"""error_summary: the one rule that turns an exception into a one-line message."""

from __future__ import annotations

import sqlite3

from database.errors import error_summary


class DiagnosticError(Exception):
    pass


def test_a_headline_message_gives_its_first_line() -> None:
    tvmscript = DiagnosticError(
        "error: Undefined variable: y\n --> model.py:8:9\n   |\n 8 |  z = R.add(x, y)\n   |  ^^^"
    )
    assert error_summary(tvmscript) == "DiagnosticError: error: Undefined variable: y"
    psycopg = OSError(
        'connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?"
    )
    assert error_summary(psycopg, with_type=False).endswith("failed: Connection refused")
    xgb = RuntimeError("[03:44:47] json.cc:409: Unknown construct\nStack trace:\n  [bt] (0) x")
    assert error_summary(xgb) == "RuntimeError: [03:44:47] json.cc:409: Unknown construct"


def test_a_traceback_gives_its_cause() -> None:
    ray_task = RuntimeError(
        "\x1b[36mray::DeviceRunner.run()\x1b[39m (pid=1, ip=10.0.0.1)\n"
        '  File "runner.py", line 4, in run\n'
        '    raise ValueError("boom")\n'
        "ValueError: boom\n"
        "a second line of detail"
    )
    assert error_summary(ray_task) == "RuntimeError: ValueError: boom"
    tvm_ffi = RuntimeError(
        "Traceback (most recent call last):\n  1: TVMFuncCall\n  0: tvm::relax::Foo\n"
        "TVMError: Check failed: x > 0"
    )
    assert error_summary(tvm_ffi, with_type=False) == "TVMError: Check failed: x > 0"
    no_name = RuntimeError('Traceback (most recent call last):\n  File "a.py", line 1\n  x +')
    assert error_summary(no_name) == "RuntimeError: x +"


def test_the_class_name_is_added_once() -> None:
    assert error_summary(KeyError("x")) == "KeyError: 'x'"
    assert error_summary(ValueError("ValueError: said twice")) == "ValueError: said twice"
    assert error_summary(sqlite3.DatabaseError("bad")) == "DatabaseError: bad"
    assert error_summary(sqlite3.DatabaseError("bad"), with_type=False) == "bad"
    assert error_summary(ValueError()) == error_summary(ValueError("\n \n")) == "ValueError"


def test_long_lines_are_cut() -> None:
    text = error_summary(ValueError("x" * 1000))
    assert len(text) == 300 and text.endswith("...")
    assert len(error_summary(ValueError("x" * 1000), limit=50)) == 50
    assert error_summary(ValueError("x" * 10), limit=50) == "ValueError: " + "x" * 10


def test_the_module_is_light() -> None:
    """Any layer may import it: it loads neither TVM nor SQLAlchemy."""
    import subprocess
    import sys

    code = (
        "import sys, database.errors; "
        "assert 'tvm' not in sys.modules and 'sqlalchemy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
