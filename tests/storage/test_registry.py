"""The scheme registry: lazy SDK imports, missing-extra errors; secret scrubbing.

Entry-point backends: tests/storage/test_extending_backend.py (as docs/extending/backend.md says).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from streaming.storage import DownloadError, Uploader, download_file, get_backend, registry
from streaming.storage.registry import _BUILTIN
from streaming.storage.secrets import redact
from tests.storage.conftest import AWS_SECRET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=120)


def test_importing_streaming_imports_no_cloud_sdk() -> None:
    result = _python('''
        import sys, streaming, streaming.storage
        from streaming.storage import get_backend
        get_backend('/a/path'); get_backend('file:///a/path')
        sdks = ('boto3', 'botocore', 'google.cloud', 'azure', 'oci', 'huggingface_hub')
        print(sorted(m for m in sys.modules if m.startswith(sdks)))
    ''')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]'


@pytest.mark.parametrize('scheme,module,extra', [
    ('s3', 'boto3', 's3'), ('gs', 'google', 'gcs'), ('azure', 'azure', 'azure'),
    ('oci', 'oci', 'oci'), ('hf', 'huggingface_hub', 'hf')])
def test_a_missing_sdk_names_the_extra_to_install(scheme, module, extra) -> None:
    # Block the SDK's import in a fresh interpreter, then use its scheme.
    result = _python(f'''
        import sys
        sys.modules[{module!r}] = None
        from streaming.storage import download_file
        try:
            download_file('{scheme}://bucket@ns/key' if {scheme!r} == 'oci' else
                          '{scheme}://datasets/o/r/key' if {scheme!r} == 'hf' else
                          '{scheme}://bucket/key', '/tmp/never-written', retries=0)
        except ImportError as error:
            print(type(error).__name__, error)
    ''')
    assert result.returncode == 0, result.stderr
    assert 'MissingDependencyError' in result.stdout
    assert f'pip install "shardflow[{extra}]"' in result.stdout or \
        f"shardflow[{extra}]" in result.stdout, result.stdout


def test_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"unsupported scheme 'nope'.*'s3'"):
        get_backend('nope://x/y')


def test_every_builtin_scheme_resolves(monkeypatch) -> None:
    monkeypatch.setattr(registry, '_instances', {})
    monkeypatch.setenv('GCS_KEY', 'key')  # gs:// needs credentials at once (HMAC keys here).
    monkeypatch.setenv('GCS_SECRET', 'secret')
    for scheme in _BUILTIN:
        if scheme:
            assert get_backend(f'{scheme}://b/k').scheme in (scheme, 'http', 'file')


def test_gs_without_credentials_fails_at_once(monkeypatch, tmp_path) -> None:
    """A ValueError naming what to set, from the backend's creation: no request, no retry."""
    pytest.importorskip('google.cloud.storage')
    from streaming.storage.errors import MissingCredentialsError
    monkeypatch.setattr(registry, '_instances', {})
    for name in list(os.environ):
        if name.startswith(('GCS_', 'GOOGLE_', 'STORAGE_EMULATOR', 'GCE_', 'CLOUDSDK_')):
            monkeypatch.delenv(name)
    monkeypatch.setenv('CLOUDSDK_CONFIG', str(tmp_path / 'no-gcloud'))
    monkeypatch.setenv('NO_GCE_CHECK', 'true')
    with pytest.raises(MissingCredentialsError, match='GCS_KEY and GCS_SECRET') as caught:
        download_file('gs://bucket/key', str(tmp_path / 'key'), retries=5)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(ValueError, match='application default credentials'):
        Uploader((str(tmp_path / 'out'), 'gs://bucket/out'))


# ---- secrets ----------------------------------------------------------------------------------
def test_redact_scrubs_known_secret_shapes(monkeypatch) -> None:
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'topsecretvalue123')
    monkeypatch.setenv('AZURE_STORAGE_CONNECTION_STRING',
                       'AccountName=a;AccountKey=c2VjcmV0a2V5c2VjcmV0a2V5;EndpointSuffix=x')
    text = redact('key topsecretvalue123 at https://user:pw@host/p?sig=abc&x=1 and '
                  'AccountKey=c2VjcmV0a2V5c2VjcmV0a2V5 Authorization: Bearer tok123 '
                  'oci://bucket@namespace/path')
    for secret in ('topsecretvalue123', 'user:pw', 'sig=abc', 'c2VjcmV0', 'tok123'):
        assert secret not in text, text
    assert 'oci://bucket@namespace/path' in text and 'x=1' in text


def test_secrets_never_reach_errors_logs_or_reprs(s3, tmp_path, caplog, monkeypatch) -> None:
    """A failing download and upload, logged at DEBUG, with a secret in the URL and the env."""
    monkeypatch.setenv('HF_TOKEN', 'hf_faketoken_9Kq2')
    caplog.set_level(logging.DEBUG, logger='streaming')
    client, bucket = s3
    backend = get_backend(f's3://{bucket}/x')
    # Credentials in a URL (a presigned-style query and userinfo) must not leak either.
    url = 'http://alice:pa55word@127.0.0.1:9/object?X-Amz-Signature=deadbeef1234'
    with pytest.raises(DownloadError) as caught:
        download_file(url, str(tmp_path / 'o'), retries=1, timeout=1)
    uploader = Uploader((str(tmp_path / 'stage'), f's3://{bucket}/up'))
    texts = [str(caught.value), repr(caught.value), caplog.text, repr(backend), repr(uploader),
             repr(get_backend(url))]
    for text in texts:
        for secret in (AWS_SECRET, 'pa55word', 'deadbeef1234', 'hf_faketoken_9Kq2'):
            assert secret not in text, (secret, text)
    assert '127.0.0.1:9/object' in str(caught.value)  # Still says which URL failed.
