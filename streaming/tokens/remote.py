"""Where token shards live: configuration from the environment, and the list of shards.

Cloudflare R2 through the source project's variables::

    R2_DATASET_ACCOUNT_ID              the account: endpoint https://ACCOUNT.r2.cloudflarestorage.com
    R2_DATASET_BUCKET_NAME             the bucket
    R2_DATASET_READ_ACCESS_KEY_ID      read credentials
    R2_DATASET_READ_SECRET_ACCESS_KEY
    DATASET_BINS_PATH                  the key prefix of the shards (e.g. ``tokenized/``)
    R2_DATASET_ENDPOINT_URL            (ours, optional) another endpoint, e.g. a local server

These make an ``r2://BUCKET/PREFIX`` remote served by an S3 client with exactly these
credentials and endpoint; nothing is written to ``os.environ`` and the secret never appears in
a repr, log line or error message. Without them, ``DATASET_BINS_PATH`` may be any URL the
storage layer serves (``s3://`` with ``S3_ENDPOINT_URL`` for any S3-compatible store, ``gs://``,
a local directory, ...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from streaming.tokens.format import MANIFEST, Manifest, TokenFormatError, ids_name, token_name
from streaming.tokens.store import RemoteShard

__all__ = ['R2Config', 'list_shards', 'remote_from_env']

_R2_VARS = ('R2_DATASET_ACCOUNT_ID', 'R2_DATASET_BUCKET_NAME', 'R2_DATASET_READ_ACCESS_KEY_ID',
            'R2_DATASET_READ_SECRET_ACCESS_KEY')


class ConfigError(ValueError):
    """A missing or malformed setting; names the variable."""


@dataclass(frozen=True)
class R2Config:
    """Read access to a Cloudflare R2 bucket (or any S3-compatible endpoint)."""

    account_id: str
    bucket: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    prefix: str = ''
    endpoint: str | None = None
    region: str = 'auto'
    scheme: str = 'r2'

    @property
    def endpoint_url(self) -> str:
        return self.endpoint or f'https://{self.account_id}.r2.cloudflarestorage.com'

    @property
    def remote(self) -> str:
        """The shards' location as a URL of this config's scheme."""
        prefix = self.prefix.strip('/')
        return f'{self.scheme}://{self.bucket}/{prefix}' if prefix else \
            f'{self.scheme}://{self.bucket}'

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> R2Config:
        env = os.environ if env is None else env
        missing = [name for name in _R2_VARS if not env.get(name)]
        if missing:
            raise ConfigError(f'R2 configuration incomplete: {", ".join(missing)} not set.')
        return cls(env['R2_DATASET_ACCOUNT_ID'], env['R2_DATASET_BUCKET_NAME'],
                   env['R2_DATASET_READ_ACCESS_KEY_ID'],
                   env['R2_DATASET_READ_SECRET_ACCESS_KEY'], env.get('DATASET_BINS_PATH', ''),
                   env.get('R2_DATASET_ENDPOINT_URL') or None)

    def register(self) -> str:
        """Serve ``self.scheme://`` URLs with these credentials; returns ``self.remote``."""
        from streaming.storage import register_backend
        register_backend(self.scheme, lambda: _r2_backend(self))
        return self.remote


def _r2_backend(config: R2Config) -> Any:
    from streaming.storage.s3 import S3Backend

    class R2Backend(S3Backend):
        scheme = config.scheme
        service = 'R2'
        credentials_hint = ('check R2_DATASET_READ_ACCESS_KEY_ID / '
                            'R2_DATASET_READ_SECRET_ACCESS_KEY and the bucket name')

        def endpoint_url(self) -> str | None:
            return config.endpoint_url

        def session_kwargs(self) -> dict[str, Any]:
            return {'aws_access_key_id': config.access_key_id,
                    'aws_secret_access_key': config.secret_access_key,
                    'region_name': config.region}

    return R2Backend()


def remote_from_env(env: Mapping[str, str] | None = None) -> str:
    """The shards' remote from the environment.

    R2 when ``R2_DATASET_ACCOUNT_ID`` is set (its backend is then registered), else
    ``DATASET_BINS_PATH`` as a URL or path.
    """
    env = os.environ if env is None else env
    if env.get('R2_DATASET_ACCOUNT_ID'):
        return R2Config.from_env(env).register()
    path = env.get('DATASET_BINS_PATH')
    if not path:
        raise ConfigError('Set R2_DATASET_* and DATASET_BINS_PATH, or DATASET_BINS_PATH to the '
                          'URL or directory of the token shards.')
    return path


def _join(remote: str, name: str) -> str:
    return f'{remote.rstrip("/")}/{name}'


def list_shards(remote: str, *, prefix: str = 'train', num_shards: int | None = None,
                ids: bool = True, manifest: bool = True, timeout: float = 60.0,
                ) -> tuple[list[RemoteShard], Manifest | None]:
    """The shards under ``remote`` and its manifest (None without one).

    With ``manifest.json`` present (and ``manifest=True``) it lists the shards, their sizes
    and checksums. Without it: shards ``0 .. num_shards - 1`` by name, or, with no
    ``num_shards``, those found by listing ``remote``. ``ids``: whether shards have sidecars.
    """
    from streaming.storage.download import fetch_bytes
    if manifest:
        url = _join(remote, MANIFEST)
        try:
            found = Manifest.from_json(fetch_bytes(url, timeout=timeout), url)
        except FileNotFoundError:
            found = None
        if found is not None:
            shards = [RemoteShard(e.index, _join(remote, e.tokens.basename), e.tokens.basename,
                                  _join(remote, e.ids.basename) if e.ids else None,
                                  e.ids.basename if e.ids else None, e)
                      for e in found.shards]
            if num_shards is not None:
                shards = shards[:num_shards]
            return shards, found
    if num_shards is None:
        numbers = _listed(remote, prefix)
        if not numbers:
            raise TokenFormatError(f'{remote}: no {token_name(prefix, 0)[:-10]}NNNNNN.npy '
                                   f'shards and no {MANIFEST}.')
    else:
        numbers = list(range(num_shards))
    return [RemoteShard(i, _join(remote, token_name(prefix, i)), token_name(prefix, i),
                        _join(remote, ids_name(i)) if ids else None,
                        ids_name(i) if ids else None) for i in numbers], None


def _listed(remote: str, prefix: str) -> list[int]:
    import re

    from streaming.storage import get_backend
    from streaming.storage.registry import is_remote_url
    pattern = re.compile(rf'(?:^|/){re.escape(prefix)}_(\d{{6}})\.npy$')
    if is_remote_url(remote):
        names = get_backend(remote).list(remote.rstrip('/') + '/')
    else:
        names = os.listdir(remote)
    return sorted({int(m.group(1)) for n in names if (m := pattern.search(n))})
