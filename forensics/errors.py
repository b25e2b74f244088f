"""The user-facing error type, defined in the bottom layer (`dataloaders.errors`) and re-exported
here so the CLI and the pipeline keep one name for it."""

from dataloaders.errors import ForensicsError

__all__ = ["ForensicsError"]
