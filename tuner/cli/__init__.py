"""The ``tunefarm`` command line (see :mod:`tuner.cli.app`); ``python -m tuner.cli`` runs it.

Importing it stays light: commands import TVM, Ray and the tuner only when they run."""

from tuner.cli.app import app, main

__all__ = ["app", "main"]
