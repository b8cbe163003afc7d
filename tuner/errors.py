"""User-facing errors: always one line, never a traceback."""


class TuneFarmError(Exception):
    """Bad input or an unusable environment, with a message the user can act on."""


class JobInterrupted(TuneFarmError):
    """The user stopped a job (Ctrl-C); what it measured is kept. Exit code 130."""
