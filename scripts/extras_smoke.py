"""The smoke test of one optional extra, run by scripts/check_extras.sh.

Two roles:

- ``serve ENDPOINTS.json`` (run by the project's dev env, which has the emulators): starts
  moto's S3 server, gcp-storage-emulator, the OCI fake of the storage tests and, when
  ``AZURITE_BLOB`` is set, Azurite, all on loopback; seeds a public object for the http and hf
  checks; writes their addresses to ENDPOINTS.json; and serves until its stdin closes.
- ``check EXTRA [ENDPOINTS.json]`` (run in a clean env holding only ``shardflow[EXTRA]``):
  uses what the extra is for, for real: a backend's upload / list / download round trip
  against its emulator, or, without one, building the backend and parsing a URL; an image
  column written and read back for ``image``; the package imported for anything else.

Exit status 0 means the extra works; any failure prints a traceback and exits non-zero.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import tempfile

PAYLOAD = b'shardflow extras check\n' * 4096  # ~94 KB: one GET; ranged GETs set below.
HF_KEY = 'org/name/resolve/main/data/blob.bin'
AZURITE_KEY = ('Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/'
               'KBHBeksoGMGw==')


# ---- serve: the emulators (dev env) ---------------------------------------------------------
def serve(out: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import boto3

    from tests.storage import servers
    started, endpoints = [], {}
    moto = servers.moto_server()
    started.append(moto)
    endpoints['s3'] = moto.url
    s3 = boto3.client('s3', endpoint_url=moto.url, aws_access_key_id='k',
                      aws_secret_access_key='s', region_name='us-east-1')
    for bucket in ('extras', 'public', 'datasets'):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket='public', Key='blob.bin', Body=PAYLOAD, ACL='public-read')
    s3.put_object(Bucket='datasets', Key=HF_KEY, Body=PAYLOAD, ACL='public-read')
    try:
        gcs = servers.gcs_emulator()
        started.append(gcs)
        endpoints['gcs'] = gcs.url
    except (OSError, RuntimeError) as error:
        print(f'extras_smoke: no gcp-storage-emulator ({error})', file=sys.stderr)
    oci = servers.FakeOCI()
    oci.buckets.add('extras')
    started.append(oci)
    endpoints['oci'] = oci.url
    workdir = tempfile.mkdtemp(prefix='extras-azurite-')
    if servers.azurite_binary() and os.environ.get('AZURITE_BLOB'):
        azurite = servers.azurite(workdir)
        started.append(azurite)
        endpoints['azure'] = azurite.url
    with open(out + '.tmp', 'w') as f:
        json.dump(endpoints, f)
    os.replace(out + '.tmp', out)
    try:
        sys.stdin.read()  # Until the caller closes our stdin (or exits).
    finally:
        for server in started:
            server.stop()


# ---- check: one extra (clean env) -----------------------------------------------------------
def _round_trip(remote: str) -> None:
    """Upload, list, download (one GET and ranged) and verify, through the public API."""
    from streaming.storage import DownloadConfig, download_file, get_backend, upload_file
    from streaming.storage.verify import hash_check
    with tempfile.TemporaryDirectory() as scratch:
        src = os.path.join(scratch, 'src.bin')
        with open(src, 'wb') as f:
            f.write(PAYLOAD)
        url = f'{remote}/smoke/blob.bin'
        upload_file(src, url, retries=1)
        listed = get_backend(remote).list(f'{remote}/smoke')
        assert url in listed, (url, listed)
        _download_and_verify(url, scratch, DownloadConfig(part_size=32 << 10, concurrency=2),
                             download_file, hash_check)
    print(f'  round trip through {type(get_backend(remote)).__name__}: ok')


def _download_and_verify(url: str, scratch: str, config, download_file, hash_check) -> None:
    expected = hashlib.sha256(PAYLOAD).hexdigest()
    for name, cfg in (('whole', None), ('ranged', config)):
        out = download_file(url, os.path.join(scratch, name), retries=1, timeout=30,
                            check=hash_check('sha256', expected), config=cfg)
        with open(out, 'rb') as f:
            assert f.read() == PAYLOAD, f'{url}: wrong bytes ({name})'


def _offline(scheme_url: str) -> None:
    if os.environ.get('STREAMING_REQUIRE_EMULATORS') == '1':
        raise RuntimeError(f'no emulator for {scheme_url} (STREAMING_REQUIRE_EMULATORS=1)')
    from streaming.storage import get_backend
    backend = get_backend(scheme_url)
    print(f'  {scheme_url} -> {backend!r} (no emulator: built, not used)')


def check_s3(endpoints: dict) -> None:
    if 's3' not in endpoints:
        return _offline('s3://bucket/key')
    os.environ.update(S3_ENDPOINT_URL=endpoints['s3'], AWS_ACCESS_KEY_ID='k',
                      AWS_SECRET_ACCESS_KEY='s', AWS_DEFAULT_REGION='us-east-1')
    _round_trip('s3://extras/s3')


def check_gcs(endpoints: dict) -> None:
    if 'gcs' not in endpoints:
        return _offline('gs://bucket/key')
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    os.environ['STORAGE_EMULATOR_HOST'] = endpoints['gcs']
    client = storage.Client(project='emulator', credentials=AnonymousCredentials())
    client.create_bucket('extras')
    _round_trip('gs://extras/gcs')


def check_azure(endpoints: dict) -> None:
    if 'azure' not in endpoints:
        return _offline('azure://container/key')
    from azure.storage.blob import BlobServiceClient
    account = 'devstoreaccount1'
    endpoint = f'{endpoints["azure"]}/{account}'
    os.environ.update(AZURE_ACCOUNT_NAME=account, AZURE_ACCOUNT_ACCESS_KEY=AZURITE_KEY,
                      AZURE_STORAGE_ENDPOINT=endpoint)
    BlobServiceClient(endpoint, credential={'account_name': account, 'account_key': AZURITE_KEY}
                      ).create_container('extras')
    _round_trip('azure://extras/azure')
    _round_trip('azure-dl://extras/adls')


def check_oci(endpoints: dict) -> None:
    if 'oci' not in endpoints:
        return _offline('oci://bucket@namespace/key')
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    scratch = tempfile.mkdtemp(prefix='extras-oci-')
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = os.path.join(scratch, 'key.pem')
    with open(key_file, 'wb') as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))
    config = os.path.join(scratch, 'config')
    with open(config, 'w') as f:
        f.write('[DEFAULT]\nuser=ocid1.user.oc1..aaaafakeuser\n'
                'fingerprint=12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0\n'
                f'tenancy=ocid1.tenancy.oc1..aaaafaketenancy\nregion=us-ashburn-1\n'
                f'key_file={key_file}\n')
    os.environ.update(OCI_CONFIG_FILE=config, OCI_SERVICE_ENDPOINT=endpoints['oci'])
    _round_trip('oci://extras@ns/oci')


def _download_only(url: str) -> None:
    from streaming.storage import DownloadConfig, download_file
    from streaming.storage.verify import hash_check
    with tempfile.TemporaryDirectory() as scratch:
        _download_and_verify(url, scratch, DownloadConfig(part_size=32 << 10, concurrency=2),
                             download_file, hash_check)
    print(f'  download of {url}: ok')


def check_http(endpoints: dict) -> None:
    if 's3' not in endpoints:
        return _offline('https://example.com/key')
    _download_only(f'{endpoints["s3"]}/public/blob.bin')


def check_hf(endpoints: dict) -> None:
    if 's3' not in endpoints:
        return _offline('hf://datasets/org/name/key')
    # hf_hub_url() gives ENDPOINT/datasets/org/name/resolve/main/PATH: a public object there.
    os.environ.update(HF_ENDPOINT=endpoints['s3'], HF_HUB_DISABLE_TELEMETRY='1')
    _download_only('hf://datasets/org/name/data/blob.bin')


def check_sftp(endpoints: dict) -> None:
    # No SSH server here (tests/compat starts one with scripts/sshd.sh): parse and build.
    from streaming.storage import get_backend
    from streaming.storage.sftp import parse_sftp_url
    assert parse_sftp_url('sftp://u@host:2222/data/x') == ('host', 2222, 'u', None, '/data/x')
    print(f'  {get_backend("sftp://host/data")!r} built, URL parsed (no SSH server used)')


def check_dbfs(endpoints: dict) -> None:
    # Databricks has no emulator: parse and build.
    from streaming.storage import get_backend
    from streaming.storage.dbfs import dbfs_path
    assert dbfs_path('dbfs:/Volumes/c/s/v/x') == '/Volumes/c/s/v/x'
    print(f'  {get_backend("dbfs:/data")!r} built, URL parsed (no workspace used)')


def check_fsspec(endpoints: dict) -> None:
    # fsspec's in-memory filesystem: a real round trip through the fallback backend.
    _round_trip('memory://extras/fsspec')


def check_image(endpoints: dict) -> None:
    import numpy as np
    from PIL import Image

    from streaming import MDSWriter, StreamingDataset
    pixels = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, 'ds')
        with MDSWriter(out=out, columns={'img': 'png', 'label': 'int'}) as writer:
            writer.write({'img': Image.fromarray(pixels), 'label': 7})
        sample = StreamingDataset(local=out, batch_size=1)[0]
        assert np.array_equal(np.asarray(sample['img']), pixels) and sample['label'] == 7
    print('  png column written and read back: ok')


def check_plan(endpoints: dict) -> None:
    # `streaming plan --yaml`: a reference simulator YAML read through PyYAML into a plan.
    from streaming.plan import DatasetShape, RunSettings, get_profile, plan
    from streaming.plan.simyaml import read_simulator_yaml
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, 'run.yaml')
        with open(path, 'w') as f:
            f.write('global_train_batch_size: 8\nmax_duration: 1ep\ntrain_loader:\n'
                    '  num_workers: 2\n  dataset: {remote: s3://b/ds, cache_limit: 1mb}\n')
        sim = read_simulator_yaml(path)
    shape = DatasetShape.synthetic(samples=2000, shard_samples=100, sample_bytes=1000)
    settings = sim.settings(nodes=1, ranks_per_node=1, total_samples=shape.total_samples)
    assert sim.urls == ['s3://b/ds'] and settings['cache_limit'] == '1mb', settings
    result = plan(shape, RunSettings(**settings), get_profile('same-region'), quality=False)
    assert result['nodes'][0]['samples'] == 2000, result['nodes'][0]
    print('  simulator YAML read and planned: ok')


def check_import(extra: str) -> None:
    """An extra with no specific check: the package and every backend module import."""
    import streaming
    print(f'  streaming {streaming.__version__} imports')


def check_fast_crc(endpoints: dict) -> None:
    """The S3 client's checksum runs on ISA-L once the extra is installed."""
    import isal.isal_zlib

    from streaming.storage import s3_light
    assert s3_light._crc32 is isal.isal_zlib.crc32, s3_light._crc32
    print('  s3_light checks CRC32 with ISA-L: ok')


CHECKS = {'s3': check_s3, 'gcs': check_gcs, 'azure': check_azure, 'oci': check_oci,
          'http': check_http, 'hf': check_hf, 'image': check_image, 'sftp': check_sftp,
          'dbfs': check_dbfs, 'fsspec': check_fsspec, 'vision': check_image, 'plan': check_plan,
          'fast-crc': check_fast_crc}
# Modules an extra exists for (imported first: a missing dependency fails here, clearly).
MODULES = {'s3': ['streaming.storage.s3'], 'gcs': ['streaming.storage.gcs'],
           'azure': ['streaming.storage.azure'], 'oci': ['streaming.storage.oci'],
           'http': ['streaming.storage.http'], 'hf': ['streaming.storage.hf'],
           'image': ['PIL.Image'], 'spark': ['pyspark'], 'sftp': ['streaming.storage.sftp'],
           'dbfs': ['streaming.storage.dbfs'], 'fsspec': ['streaming.storage.fsspec_backend'],
           'vision': ['streaming.vision'], 'text': ['transformers', 'streaming.text'],
           'convert': ['pyarrow', 'streaming.convert.inputs'],
           'tokens': ['tokenizers', 'pyarrow', 'streaming.tokens.pretokenize'],
           'obstore': ['obstore.store'], 'plan': ['yaml', 'streaming.plan.simyaml'],
           'fast-crc': ['isal.isal_zlib']}


def check(extra: str, endpoints_file: str | None) -> None:
    endpoints = {}
    if endpoints_file and os.path.exists(endpoints_file):
        with open(endpoints_file) as f:
            endpoints = json.load(f)
    for module in MODULES.get(extra, []):
        importlib.import_module(module)
        print(f'  import {module}: ok')
    CHECKS.get(extra, lambda _: check_import(extra))(endpoints)


if __name__ == '__main__':
    if len(sys.argv) >= 3 and sys.argv[1] == 'serve':
        serve(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == 'check':
        check(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        sys.exit('usage: extras_smoke.py serve ENDPOINTS.json | check EXTRA [ENDPOINTS.json]')
