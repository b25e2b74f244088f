"""Storage faults as one line naming the object: what went wrong and what to do, never a
traceback, never a signed URL or a credential (botocore's own messages are not repeated; only the
error code the service returned)."""

from __future__ import annotations

from typing import Any

from dataloaders.errors import DataError
from dataloaders.storage.urls import shown

NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
DENIED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
CHANGED = {"412", "PreconditionFailed"}
THROTTLED = {
    "503",
    "429",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "ServiceUnavailable",
    "RequestThrottled",
}


class StorageError(DataError):
    """An object could not be read (or written) as asked; the message starts with its URL."""

    def __init__(self, url: str, problem: str) -> None:
        self.url = shown(url)
        super().__init__(f"{self.url}: {problem}")


def _code(err: Any) -> str:
    response = getattr(err, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code or (str(status) if status else "")


def s3_fault(
    url: str, err: BaseException, *, endpoint: str, tries: int, etag: str = ""
) -> StorageError:
    """The one-line StorageError for a botocore exception raised while reading `url`."""
    import botocore.exceptions as boto

    where = f" at {endpoint}" if endpoint else ""
    if isinstance(err, boto.NoCredentialsError | boto.PartialCredentialsError):
        return StorageError(
            url,
            "no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile)",
        )
    if isinstance(err, boto.ConnectTimeoutError | boto.ReadTimeoutError):
        return StorageError(url, f"storage endpoint{where} timed out ({tries} attempts)")
    if isinstance(err, boto.EndpointConnectionError | boto.ConnectionError):
        return StorageError(url, f"storage endpoint{where} unreachable ({tries} attempts)")
    code = _code(err)
    if code in NOT_FOUND:
        return StorageError(url, "object not found")
    if code == "NoSuchBucket":
        return StorageError(url, "bucket not found")
    if code in DENIED:
        return StorageError(url, f"access denied ({code}): check the credentials or profile")
    if code in CHANGED:
        return StorageError(
            url,
            f"the object changed after it was indexed (its ETag is no longer {etag}); refused, "
            "since a replay mixing two versions would be silently wrong: run again",
        )
    if code in THROTTLED:
        return StorageError(
            url,
            f"throttled by the storage endpoint ({code}), still refused after {tries} "
            "attempts; retry later (FORENSICS_STORAGE_ATTEMPTS sets the tries)",
        )
    if code == "InvalidRange":
        return StorageError(url, "byte range beyond the end of the object")
    return StorageError(url, f"storage request failed ({code or type(err).__name__})")
