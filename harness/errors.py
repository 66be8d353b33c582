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


class ServerStartFailed(ServerError):
    """The server process exited before it was ready; `reason` is its own error line."""

    def __init__(self, message: str, *, server_exit_code: int | None, reason: str | None) -> None:
        super().__init__(message)
        self.server_exit_code = server_exit_code
        self.reason = reason


class DatasetError(ReproError):
    """A dataset could not be built or verified."""


class RunError(ReproError):
    """A run directory is missing, incomplete or would be overwritten."""
