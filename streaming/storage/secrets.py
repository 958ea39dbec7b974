"""Scrub credentials from text before it reaches a log, an error message or a repr."""

from __future__ import annotations

import logging
import os
import re
import threading

__all__ = ['redact', 'redact_sdk_logs', 'scrub_exception', 'SECRET_ENV_VARS']

# Environment variables whose values are secrets (never identifiers such as key ids).
SECRET_ENV_VARS = (
    'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_SECURITY_TOKEN', 'GCS_SECRET',
    'AZURE_ACCOUNT_ACCESS_KEY', 'AZURE_STORAGE_KEY', 'AZURE_STORAGE_CONNECTION_STRING',
    'AZURE_STORAGE_SAS_TOKEN', 'AZURE_CLIENT_SECRET', 'HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN',
    'OCI_KEY_PASSPHRASE', 'STREAMING_HTTP_AUTHORIZATION',
)
_MASK = '***'
# user:password@ in URLs of network schemes (oci://bucket@namespace is not a credential).
_USERINFO = re.compile(r'(?i)\b((?:https?|ftp|sftp)://)[^/\s@]+@')
# user:password@ in any other scheme (a colon in the userinfo: never oci's bucket@namespace).
_ANY_USERINFO = re.compile(r'(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*:[^/\s@]+@')
# Signed-URL and token query parameters.
_QUERY = re.compile(r'(?i)([?&](?:sig|signature|x-amz-signature|x-amz-credential|'
                    r'x-amz-security-token|x-goog-signature|x-goog-credential|token|'
                    r'access_token|api_key|key)=)[^&\s\'"]+')
# Key=value secrets in Azure connection strings and Authorization-like headers.
_PAIRS = re.compile(r'(?i)((?:AccountKey|SharedAccessSignature|Authorization)\s*[=:]\s*'
                    r'(?:(?:Bearer|Basic|Signature|SharedKey)\s+)?|Bearer\s+)[^;\s\'",]+')


def _secret_values() -> list[str]:
    values = []
    for name in SECRET_ENV_VARS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            values.append(value)
            # Connection strings also hold the key on its own.
            values.extend(part.split('=', 1)[1] for part in value.split(';')
                          if part.lower().startswith('accountkey=') and len(part) > 15)
    return sorted(set(values), key=len, reverse=True)


def redact(text: object) -> str:
    """``text`` as a string with every credential we know of replaced by ``***``."""
    out = str(text)
    for value in _secret_values():
        out = out.replace(value, _MASK)
    out = _USERINFO.sub(r'\1' + _MASK + '@', out)
    out = _ANY_USERINFO.sub(r'\1' + _MASK + '@', out)
    out = _QUERY.sub(r'\1' + _MASK, out)
    return _PAIRS.sub(r'\1' + _MASK, out)


def _scrub_value(value: object, depth: int = 0) -> object:
    if isinstance(value, str):
        return redact(value)
    if depth < 3 and isinstance(value, dict):
        return {k: _scrub_value(v, depth + 1) for k, v in value.items()}
    if depth < 3 and isinstance(value, (list, tuple)):
        return type(value)(_scrub_value(v, depth + 1) for v in value)
    if isinstance(value, BaseException):
        scrub_exception(value)
    return value


def scrub_exception(error: BaseException | None) -> BaseException | None:
    """Redact credentials, in place, from ``error`` and every exception chained to it.

    SDK errors put endpoint URLs (with any password in them) in their messages and attributes;
    wrapping them (``raise ... from error``) would still print them in a traceback. This walks
    ``__cause__`` and ``__context__`` (printed or not) and rewrites each exception's ``args``
    and string attributes. Returns ``error``.
    """
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        try:
            current.args = tuple(_scrub_value(a) for a in current.args)
            for name, value in list(getattr(current, '__dict__', {}).items()):
                if not isinstance(value, BaseException):
                    setattr(current, name, _scrub_value(value))
                else:
                    pending.append(value)
        except (AttributeError, TypeError):
            pass  # An exception type with read-only attributes: leave it.
        if isinstance(current, OSError) and isinstance(current.filename, str):
            try:
                current.filename = redact(current.filename)
            except (AttributeError, TypeError):
                pass
        pending += [current.__cause__, current.__context__]
    return error


# Loggers of the SDKs behind our backends: their DEBUG records quote endpoint URLs and headers.
SDK_LOGGERS = ('botocore', 'boto3', 's3transfer', 'urllib3', 'azure', 'google', 'oci',
               'paramiko', 'huggingface_hub', 'fsspec', 'databricks')
_factory_lock = threading.Lock()
_installed = False


def redact_sdk_logs() -> None:
    """Redact credentials from every log record of the SDKs' loggers, at every level.

    A filter on a logger does not see its children's records, so this wraps the log-record
    factory instead: records of ``SDK_LOGGERS`` (and their children) are formatted and redacted
    when created; other records pass through untouched. Installed once, on first backend use,
    on top of whatever factory is in place.
    """
    global _installed
    if _installed:
        return
    with _factory_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if record.name.split('.', 1)[0] in SDK_LOGGERS:
                try:
                    record.msg, record.args = redact(record.getMessage()), None
                except Exception:  # noqa: BLE001 - a malformed record: keep it as it was.
                    pass
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
