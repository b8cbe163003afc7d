"""Errors raised by the schedule database, and :func:`error_summary`, the one way every
package (database, workers, tuner, benchmarks) turns an exception into a one-line message.

This module imports nothing of TuneFarm's and nothing heavy, so the lowest layer can hold it.
"""

from __future__ import annotations

import re


class DatabaseError(Exception):
    """A database problem the user can act on (bad URL, unreachable server, old schema...)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TRACEBACK = re.compile(r'^(Traceback \(most recent call last\):|File ".*", line \d+)')
_NAMED = re.compile(r"^[A-Za-z_][\w.]*(\([\w.]+\))?:(\s|$)")


def error_summary(err: BaseException, *, with_type: bool = True, limit: int = 300) -> str:
    """One line that sums up ``err``: its most informative line.

    Of ``str(err)``'s lines (colour codes removed, blank lines skipped):

    - a message that carries a Python traceback (Ray's task errors, errors re-raised across
      TVM's FFI) ends with its cause: the line is the last ``Name: text`` line after the last
      frame (``ValueError: boom``), else the last line;
    - any other message leads with its headline, which drivers and libraries follow with
      source excerpts, hints, links or native backtraces (TVMScript diagnostics, psycopg,
      SQLAlchemy, XGBoost, Ray's actor errors): the line is the first one.

    The line is prefixed with the error's class name (``KeyError: 'x'``) unless ``with_type``
    is false or it already starts with the name of the class or one of its bases; an empty
    message gives the class name alone. A line longer than ``limit`` ends in ``...``.
    """
    name = type(err).__name__
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines()]
    lines = [line for line in lines if line]
    frames = [i for i, line in enumerate(lines) if _TRACEBACK.match(line)]
    if frames:
        causes = [line for line in lines[frames[-1] + 1 :] if _NAMED.match(line)]
        text = causes[-1] if causes else lines[-1]
    else:
        text = lines[0] if lines else ""
    if not text:
        return name
    if with_type:
        bases = {cls.__name__ for cls in type(err).__mro__}
        if text.split(":", 1)[0].rsplit(".", 1)[-1] not in bases:
            text = f"{name}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
