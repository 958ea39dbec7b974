"""A store's request-rate budget, answered the way real stores refuse: for the link emulator.

Object stores allow a bounded request rate per key prefix and refuse the rest: S3 with
``503 SlowDown`` (an XML error body), GCS with ``429`` (a JSON error), Azure Blob with
``503 ServerBusy`` (an XML error and an ``x-ms-error-code`` header). ``StoreLimits`` keeps one
token bucket per prefix (the key up to its last ``/``): ``allow_rps`` tokens per second, up to
``burst`` seconds' worth banked; a request that finds no token is refused (and uses none).
``retry_after`` adds a ``Retry-After`` header to refusals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ['STYLES', 'StoreLimits', 'refusal']

STYLES = ('s3', 'gcs', 'azure')


def refusal(style: str, target: str, retry_after: float | None = None) -> bytes:
    """The full HTTP response a throttling store of ``style`` sends for ``target``."""
    if style == 's3':
        status, headers = '503 Slow Down', [('Content-Type', 'application/xml')]
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                '<Message>Please reduce your request rate.</Message>'
                f'<Resource>{target}</Resource><RequestId>fleet</RequestId></Error>').encode()
    elif style == 'gcs':
        status, headers = '429 Too Many Requests', [('Content-Type', 'application/json')]
        body = (b'{"error": {"code": 429, "message": "The rate of change requests to the object '
                b'is too high; please reduce your request rate.", "errors": [{"reason": '
                b'"rateLimitExceeded"}]}}')
    elif style == 'azure':
        status = '503 The server is busy.'
        headers = [('Content-Type', 'application/xml'), ('x-ms-error-code', 'ServerBusy')]
        body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                b'<Message>The server is busy.</Message></Error>')
    else:
        raise ValueError(f'throttle style must be one of {STYLES}, got {style!r}.')
    if retry_after is not None:
        headers.append(('Retry-After', f'{retry_after:g}'))
    headers += [('Content-Length', str(len(body))), ('Connection', 'keep-alive')]
    head = f'HTTP/1.1 {status}\r\n' + ''.join(f'{k}: {v}\r\n' for k, v in headers) + '\r\n'
    return head.encode('latin-1') + body


@dataclass
class StoreLimits:
    """Per-prefix request budgets; ``admit(target, now)`` says whether a request may pass."""

    allow_rps: float
    style: str = 's3'
    retry_after: float | None = None
    burst: float = 1.0
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.allow_rps <= 0:
            raise ValueError(f'allow_rps must be > 0, got {self.allow_rps}.')
        if self.style not in STYLES:
            raise ValueError(f'throttle style must be one of {STYLES}, got {self.style!r}.')

    @staticmethod
    def prefix(target: str) -> str:
        path = target.split('?', 1)[0]
        return path.rsplit('/', 1)[0]

    def admit(self, target: str, now: float) -> bool:
        """Take a token of ``target``'s prefix if there is one."""
        key = self.prefix(target)
        capacity = max(1.0, self.allow_rps * self.burst)
        tokens, at = self._buckets.get(key, (capacity, now))
        tokens = min(capacity, tokens + (now - at) * self.allow_rps)
        admitted = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if admitted else tokens, now)
        return admitted

    def refusal(self, target: str) -> bytes:
        return refusal(self.style, target, self.retry_after)
