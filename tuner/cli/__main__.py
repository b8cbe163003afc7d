"""``python -m tuner.cli``: the ``tunefarm`` command line."""

from tuner.cli.app import main

main()
