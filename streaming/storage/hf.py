"""``hf://datasets/ORG/NAME[@REVISION]/PATH``: dataset repositories on the Hugging Face Hub.

URLs and auth headers come from huggingface_hub (``HF_ENDPOINT``, ``HF_TOKEN`` or the cached
login); bodies are fetched by the shared HTTP path, so downloads get the same ranged GETs,
timeouts, retries and checks as every other backend. Uploads and listing use ``HfApi``.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

import huggingface_hub
from huggingface_hub.utils import build_hf_headers

from streaming.storage.http import HTTPBackend
from streaming.storage.secrets import redact

__all__ = ['HFBackend', 'split_hf_url']


def split_hf_url(url: str) -> tuple[str, str, str | None]:
    """``hf://datasets/org/name[@rev]/path`` -> (repo id, path in repo, revision)."""
    parsed = urlparse(url)
    parts = [parsed.netloc] + [p for p in unquote(parsed.path).split('/') if p]
    if len(parts) < 3 or parts[0] != 'datasets':
        raise ValueError(f'URL {redact(url)!r}: expected hf://datasets/ORG/NAME[@REVISION]/PATH.')
    org, name = parts[1], parts[2]
    name, _, revision = name.partition('@')
    return f'{org}/{name}', '/'.join(parts[3:]), revision or None


class HFBackend(HTTPBackend):
    """Hugging Face Hub dataset repositories."""

    scheme = 'hf'

    def resolve(self, url: str) -> str:
        repo, path, revision = split_hf_url(url)
        return huggingface_hub.hf_hub_url(repo, path, repo_type='dataset', revision=revision,
                                          endpoint=os.environ.get('HF_ENDPOINT') or None)

    def headers(self, url: str) -> dict[str, str]:
        return {'Accept-Encoding': 'identity', **build_hf_headers()}

    def upload(self, local_path: str, url: str) -> None:
        repo, path, revision = split_hf_url(url)
        huggingface_hub.HfApi().upload_file(path_or_fileobj=local_path, path_in_repo=path,
                                            repo_id=repo, repo_type='dataset', revision=revision)

    def list(self, url: str) -> list[str]:
        repo, prefix, revision = split_hf_url(url)
        at = f'@{revision}' if revision else ''
        files = huggingface_hub.HfApi().list_repo_files(repo, repo_type='dataset',
                                                        revision=revision)
        return sorted(f'hf://datasets/{repo}{at}/{f}' for f in files if f.startswith(prefix))
