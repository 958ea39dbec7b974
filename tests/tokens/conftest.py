"""Fixtures for the token-shard tests: the storage tests' servers (moto on loopback, the fault
proxy) and small token datasets written with ``TokenShardWriter``."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.storage import registry
from tests.storage import servers
from tests.storage.conftest import _isolated_env, moto, s3, s3_env  # noqa: F401 - fixtures reused.

SEQ = 16


def tokens_for(index: int, count: int, dtype: str = 'uint32') -> np.ndarray:
    """Deterministic tokens for shard ``index`` (every value says which shard and where)."""
    return ((np.arange(count, dtype=np.uint64) * 7 + index * 1_000_003) % 60_000).astype(dtype)


def write_dataset(out: str, shards: int, windows: int, *, seq_len: int = SEQ,
                  dtype: str = 'uint32', tail: int = 0, **kwargs):
    """``shards`` shards of ``windows`` windows (plus ``tail`` tokens in a shorter last one)."""
    from streaming.tokens.writer import TokenShardWriter
    per = windows * seq_len
    with TokenShardWriter(out, seq_len=seq_len, shard_tokens=per, dtype=dtype, **kwargs) as w:
        for i in range(shards):
            w.write(tokens_for(i, per, dtype))
        if tail:
            w.write(tokens_for(shards, tail, dtype))
    return w.manifest()


@pytest.fixture
def seq() -> int:
    return SEQ


@pytest.fixture
def proxied(s3, moto, monkeypatch):  # noqa: F811 - the fixtures imported above.
    """A function writing a token dataset to moto, returning (remote, proxy); reads go through
    a FaultProxy."""
    _, bucket = s3
    made = []

    def make(shards: int, windows: int, **kwargs):
        remote = f's3://{bucket}/ds'
        write_dataset(remote, shards, windows, **kwargs)
        proxy = servers.FaultProxy(moto.port, stall_seconds=3.0)
        made.append(proxy)
        s3_env(monkeypatch, proxy.url)
        monkeypatch.setenv('AWS_RESPONSE_CHECKSUM_VALIDATION', 'when_required')
        monkeypatch.setattr(registry, '_instances', {})
        return remote, proxy

    yield make
    for proxy in made:
        proxy.stop()


def gets(proxy: servers.FaultProxy, index: int) -> int:
    """GET requests the proxy saw for shard ``index``'s token file."""
    return sum(n for (method, path), n in proxy.counts.items()
               if method == 'GET' and path.endswith(f'train_{index:06d}.npy'))
