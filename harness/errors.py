"""Errors the CLI turns into a one-line message and a non-zero exit code."""


class ReproError(Exception):
    """A user-facing error: the message must name the file, key or value at fault."""

    exit_code = 2


class ConfigError(ReproError):
    """A profile, recipe, policy or build entry failed validation."""


class BuildError(ReproError):
    """A vLLM build could not be installed or is not installable on this machine."""


class ServerError(ReproError):
    """The server did not start, died, or could not be reached."""


class DatasetError(ReproError):
    """A dataset could not be built or verified."""


class RunError(ReproError):
    """A run directory is missing, incomplete or would be overwritten."""
