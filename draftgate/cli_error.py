"""The one exception subcommands raise for user errors."""


class CliError(Exception):
    """A user error: printed as one line, exit status 2, never a traceback."""
