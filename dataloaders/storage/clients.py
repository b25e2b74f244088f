"""boto3 clients for the S3-like schemes, made the way each training library makes its own.

- megatron-core: `boto3.client("s3")`, the default session (Megatron-LM core 0.16.1
  `megatron/core/datasets/object_storage_utils.py:234,267` and `indexed_dataset.py:515`):
  AWS_PROFILE, AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 and the usual AWS_* variables, as botocore
  reads them; no credentials is an error.
- MosaicML streaming (0.13.0 `streaming/base/storage/download.py:243-262`): the default session,
  endpoint from S3_ENDPOINT_URL, unsigned requests without credentials (:200-206).
- OLMo-core (ai2-olmo-core 3.0.0 `olmo_core/io.py:867-931`): a session on S3_PROFILE for `s3://`
  (:888-890), R2_PROFILE + R2_ENDPOINT_URL for `r2://` (:891-897, :914-921), WEKA_PROFILE +
  WEKA_ENDPOINT_URL for `weka://` (:899-905, :922-929), `use_ssl` off when OLMO_NO_SSL is set
  (:883), and unsigned requests when the session has no credentials (:874-877).

Every client gets bounded retries ("standard" mode, which also retries throttling) and connect and
read timeouts, so a dead endpoint or a throttling storm ends in an error, never a hang:
FORENSICS_STORAGE_ATTEMPTS (default 5), FORENSICS_STORAGE_CONNECT_TIMEOUT (s, default 10),
FORENSICS_STORAGE_READ_TIMEOUT (s, default 60).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

from dataloaders.errors import ConfigError, EnvironmentProblem
from dataloaders.storage.urls import shown

# How a library makes its client, named by what it does (each family passes its library's):
# "default-session": boto3's default session, credentials required (megatron-core);
# "scheme-profiles": a profile and endpoint per scheme from the environment, anonymous without
#   credentials, OLMO_NO_SSL (OLMo-core's io.py); "s3-endpoint-env": the default session with
#   S3_ENDPOINT_URL, anonymous without credentials (streaming's S3Downloader).
Rules = Literal["default-session", "scheme-profiles", "s3-endpoint-env"]
_clients: dict[tuple[str, str, tuple[str, ...]], Any] = {}
_lock = threading.Lock()
_ENV_KEYS = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "S3_PROFILE",
    "R2_PROFILE",
    "R2_ENDPOINT_URL",
    "WEKA_PROFILE",
    "WEKA_ENDPOINT_URL",
    "OLMO_NO_SSL",
    "S3_ENDPOINT_URL",
    "FORENSICS_STORAGE_ATTEMPTS",
    "FORENSICS_STORAGE_CONNECT_TIMEOUT",
    "FORENSICS_STORAGE_READ_TIMEOUT",
)


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be positive")
    return value


def attempts() -> int:
    """Total tries per request (the first one included)."""
    return int(_env_number("FORENSICS_STORAGE_ATTEMPTS", 5))


def botocore_config(unsigned: bool = False) -> Any:
    """Timeouts and bounded retries for every request."""
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(
        connect_timeout=_env_number("FORENSICS_STORAGE_CONNECT_TIMEOUT", 10),
        read_timeout=_env_number("FORENSICS_STORAGE_READ_TIMEOUT", 60),
        retries={"max_attempts": attempts(), "mode": "standard"},
    )
    if unsigned:
        config = config.merge(Config(signature_version=UNSIGNED))
    return config


def _boto3() -> Any:
    try:
        import boto3
    except ModuleNotFoundError:
        raise EnvironmentProblem(
            "object storage needs boto3: pip install 'forensics[remote]' (or boto3)"
        ) from None
    return boto3


def _needed(name: str, scheme: str, url: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(
            f"{shown(url)}: {scheme}:// paths need ${name} (OLMo-core's io.py reads it for "
            f"{scheme}://)"
        )
    return value


def _olmo_session_args(scheme: str, url: str) -> tuple[str | None, str | None]:
    """(profile, endpoint) as OLMo-core's `_get_s3_profile_name` / `_get_s3_endpoint_url`."""
    if scheme == "s3":
        return os.environ.get("S3_PROFILE") or None, None
    prefix = scheme.upper()
    return _needed(f"{prefix}_PROFILE", scheme, url), _needed(f"{prefix}_ENDPOINT_URL", scheme, url)


def _make(scheme: str, rules: Rules, url: str) -> Any:
    boto3 = _boto3()
    import botocore.exceptions as boto_errors

    if rules == "scheme-profiles":
        profile, endpoint = _olmo_session_args(scheme, url)
    elif rules == "s3-endpoint-env":  # streaming's S3Downloader: S3_ENDPOINT_URL
        profile, endpoint = None, os.environ.get("S3_ENDPOINT_URL") or None
    else:
        profile, endpoint = None, None
    try:
        session = boto3.Session(profile_name=profile)
    except boto_errors.ProfileNotFound:
        raise ConfigError(f"{shown(url)}: AWS profile {profile!r} not found") from None
    unsigned = False
    if session.get_credentials() is None:
        if rules == "default-session":
            raise ConfigError(
                f"{shown(url)}: no credentials for {scheme}:// (boto3 found none: set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            )
        unsigned = True  # OLMo-core io.py:876-877, streaming download.py:200-206: anonymous
    use_ssl = rules != "scheme-profiles" or not int(os.environ.get("OLMO_NO_SSL", "0") or 0)
    return session.client(
        "s3", endpoint_url=endpoint, config=botocore_config(unsigned), use_ssl=use_ssl
    )


def s3_client(url: str, scheme: str, rules: Rules = "scheme-profiles") -> Any:
    """The (thread-safe, shared) client for `scheme` under a library's rules; made again when
    one of the variables it depends on changes. `url` only names the object in errors."""
    key = (scheme, rules, tuple(os.environ.get(k, "") for k in _ENV_KEYS))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _make(scheme, rules, url)
        return client


def endpoint_of(client: Any) -> str:
    """The endpoint a client talks to, for messages (credentials never included)."""
    return shown(getattr(getattr(client, "meta", None), "endpoint_url", "") or "")
