"""The user-facing error types, defined in the bottom layer (`dataloaders.errors`) and re-exported
here so the CLI and the pipeline keep one name for each."""

from dataloaders.errors import ConfigError, DataError, EnvironmentProblem, ForensicsError

__all__ = ["ConfigError", "DataError", "EnvironmentProblem", "ForensicsError"]
