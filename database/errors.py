"""Errors raised by the schedule database: always a one-line, user-facing message."""


class DatabaseError(Exception):
    """A database problem the user can act on (bad URL, unreachable server, old schema...)."""
