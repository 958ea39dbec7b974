"""Which S3 read client: ours (``s3_light``), boto3, obstore, the CRT, Mountpoint, measured.

For each link (``--links``: ``loopback`` = moto on 127.0.0.1 with nothing between, ``proxy`` =
the asyncio link emulator, ``kernel`` = the kernel-shaped link; both emulators with
``--profile``), ``--objects`` objects of ``--size`` random bytes are uploaded once; then, per
repeat, each client runs in a fresh process (order rotated every repeat) and reports:

- import time (on top of ``import streaming``) and client start-up (client built + one 1 KiB
  GET), wall and CPU;
- warm time to first byte (median of 5 sequential 1 KiB GETs);
- whole-object GETs, ``--in-flight`` at a time: MB/s and CPU-seconds per GB (user+sys of the
  client's process, native threads included);
- the same bytes as ranged GETs of ``--part`` bytes.

Then the behaviours, against a small stub S3 server on loopback started here (each client's own
retries off, as the download layer uses it): a ``503 SlowDown`` with ``Retry-After`` (does the
error surface with its status, how many requests were sent), a connection reset half-way
through a body (an error, a silent short body, or a retry), and which credentials each client
finds: environment keys, a shared credentials file + ``AWS_PROFILE``, ``S3_UNSIGNED=1``, and no
credentials anywhere; and whether a child forked after the client was used (as DataLoader
workers are) can read with a client of its own. ``--links`` with no link runs the probes only.

The candidates must be importable by the interpreter running this (clients that are not are
reported as missing): ``scripts/transport_env.sh`` builds a separate venv with them::

    PY=$(bash scripts/transport_env.sh)
    flock /work/bench.lock $PY -m benchmarks.transport_bench --repeats 3
    $PY -m benchmarks.transport_bench --links loopback --objects 16 --repeats 1 --no-probes

Results: ``benchmarks/results/transport.json`` (``--out``); docs/storage/transport.md reads them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.linkemu import PROFILES
from benchmarks.s3 import CREDENTIALS, MotoServer
from benchmarks.transport_clients import AZURE_CLIENTS, CLIENTS, MODULES, VARIANTS
from benchmarks.transport_stub import StubS3
from tests.storage.conftest import AZURITE_ACCOUNT, AZURITE_KEY  # Azurite's well-known account

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 'bench'
METRICS = ('import_s', 'import_cpu_s', 'startup_s', 'startup_cpu_s', 'first_byte_s')
FLOW_METRICS = ('mb_per_s', 'cpu_s_per_gb', 'first_byte_median_s')


def _log(message: str) -> None:
    print(f'[transport] {message}', file=sys.stderr, flush=True)


def load() -> str:
    """The 1-minute load average, as the figures are quoted with it."""
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def clean_env(home: str, **extra: str) -> dict[str, str]:
    """This process's environment without AWS/S3 settings, ``HOME`` at ``home``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('AWS_', 'S3_', 'STREAMING_')) and
           k.lower() not in ('http_proxy', 'https_proxy', 'all_proxy')}
    env.update(HOME=home, PYTHONPATH=REPO, **extra)
    return env


def worker(client: str, task: str, endpoint: str, env: dict[str, str], timeout: float,
           *args: str) -> dict[str, Any]:
    """Run ``benchmarks.transport_clients`` in a fresh process; its JSON line, or the failure."""
    command = [sys.executable, '-m', 'benchmarks.transport_clients', client, '--task', task,
               '--endpoint', endpoint, '--bucket', BUCKET, *args]
    try:
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {'error': 'timeout', 'message': f'no answer within {timeout:.0f} s'}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {'error': 'crashed', 'message': done.stderr.strip()[-400:]}
    return json.loads(lines[-1])


# ---- throughput, CPU, latency ------------------------------------------------------------------
class AzureLink:
    """Azurite on loopback (``link='loopback'``) or behind the asyncio link emulator (``'proxy'``).

    ``endpoint`` is the account's URL; ``env`` the credentials the clients read.
    """

    env = {'AZURE_ACCOUNT_NAME': AZURITE_ACCOUNT, 'AZURE_ACCOUNT_ACCESS_KEY': AZURITE_KEY}

    def __init__(self, link: str, profile: str) -> None:
        self.link, self.profile = link, profile
        self._scratch = tempfile.TemporaryDirectory(prefix='azurite-')
        self._azurite: Any = None
        self._proxy: Any = None
        self.endpoint = ''

    def __enter__(self) -> AzureLink:
        from tests.storage import servers
        self._azurite = servers.azurite(self._scratch.name)
        base = self._azurite.url
        if self.link == 'proxy':
            from benchmarks.linkemu import LinkEmulator
            self._proxy = LinkEmulator(base, PROFILES[self.profile]).__enter__()
            base = self._proxy.endpoint
        self.endpoint = f'{base}/{AZURITE_ACCOUNT}'
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proxy is not None:
            self._proxy.close()
        if self._azurite is not None:
            self._azurite.stop()
        self._scratch.cleanup()

    def put(self, items: list[tuple[str, bytes]]) -> None:
        """Create the container and upload ``(name, data)`` straight to Azurite."""
        from azure.storage.blob import BlobServiceClient
        service = BlobServiceClient(f'{self._azurite.url}/{AZURITE_ACCOUNT}', credential={
            'account_name': AZURITE_ACCOUNT, 'account_key': AZURITE_KEY})
        container = service.create_container(BUCKET)
        for name, data in items:
            container.upload_blob(name, data)


def _open(store: str, link: str, profile: str) -> Any:
    if store == 'azure':
        if link == 'kernel':
            raise SystemExit('--store azure: the kernel link serves moto only; use loopback/proxy')
        return AzureLink(link, profile)
    if link == 'loopback':
        return MotoServer(BUCKET)
    from benchmarks.linkemu_kernel import open_link
    start = PROFILES['uncapped'] if link == 'kernel' else PROFILES[profile]
    return open_link(start, BUCKET, mode=link)


def _upload(server: Any, objects: int, size: int) -> list[str]:
    keys = [f'shard.{i:05}.mds' for i in range(objects)]
    items = [('small', os.urandom(1024))] + [(key, os.urandom(size)) for key in keys]
    if isinstance(server, AzureLink):
        server.put(items)
    else:
        s3 = server.client()
        for key, data in items:
            s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    return keys


def run_link(link: str, args: argparse.Namespace, clients: list[str], home: str
             ) -> list[dict[str, Any]]:
    """Every client on one link, ``args.repeats`` rounds in rotated order; one row per run."""
    rows = []
    with _open(getattr(args, 'store', 's3'), link, args.profile) as server:
        keys = _upload(server, args.objects, args.size)
        if link == 'kernel':
            server.set_profile(PROFILES[args.profile])
        env = clean_env(home, **(server.env if isinstance(server, AzureLink) else CREDENTIALS))
        for repeat in range(args.repeats):
            order = clients[repeat % len(clients):] + clients[:repeat % len(clients)]
            for client in order:
                before = load()
                row = worker(client, 'bench', server.endpoint, env, args.timeout, '--keys',
                             *keys, '--size', str(args.size), '--part', str(args.part),
                             '--in-flight', str(args.in_flight))
                row.update(client=client, link=link, repeat=repeat, load=before)
                rows.append(row)
                _log(f'{link} #{repeat} {client}: ' + (
                    row['error'] + ' ' + row['message'] if 'error' in row else
                    f"whole {row['whole']['mb_per_s']:.1f} MB/s "
                    f"{row['whole']['cpu_s_per_gb']:.2f} CPU-s/GB, ranged "
                    f"{row['ranged']['mb_per_s']:.1f} MB/s {row['ranged']['cpu_s_per_gb']:.2f}"
                    f" CPU-s/GB, start-up {row['startup_s']:.2f} s (load {before})"))
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per link and client: the median of each figure over the repeats, with its min and max."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for link in dict.fromkeys(r['link'] for r in rows):
        for client in dict.fromkeys(r['client'] for r in rows):
            runs = [r for r in rows if r['link'] == link and r['client'] == client and
                    'error' not in r]
            if not runs:
                continue
            figures: dict[str, Any] = {}
            values = {m: [r[m] for r in runs] for m in METRICS}
            for kind in ('whole', 'ranged'):
                values.update({f'{kind}_{m}': [r[kind][m] for r in runs] for m in FLOW_METRICS})
            for name, series in values.items():
                figures[name] = {'median': statistics.median(series), 'min': min(series),
                                 'max': max(series)}
            figures['runs'] = len(runs)
            out.setdefault(link, {})[client] = figures
    return out


# ---- behaviours ---------------------------------------------------------------------------------
def _credentials_cases(scratch: str) -> dict[str, dict[str, str]]:
    """Name -> environment of each credential chain users rely on."""
    credentials = os.path.join(scratch, 'credentials')
    with open(credentials, 'w') as f:
        f.write('[bench]\naws_access_key_id = AKIAPROFILEKEY\n'
                'aws_secret_access_key = profile-secret\n')
    config = os.path.join(scratch, 'config')
    with open(config, 'w') as f:
        f.write('[profile bench]\nregion = us-east-1\n')
    region = {'AWS_DEFAULT_REGION': 'us-east-1'}
    return {
        'env keys': {**region, 'AWS_ACCESS_KEY_ID': 'AKIAENVKEY',
                     'AWS_SECRET_ACCESS_KEY': 'env-secret'},
        'profile file': {**region, 'AWS_SHARED_CREDENTIALS_FILE': credentials,
                         'AWS_CONFIG_FILE': config, 'AWS_PROFILE': 'bench'},
        'S3_UNSIGNED=1': {**region, 'S3_UNSIGNED': '1'},
        'no credentials': region,
    }


def run_probes(clients: list[str], home: str, timeout: float) -> dict[str, Any]:
    """Throttling, resets and credential chains, per client, against the stub server."""
    results: dict[str, Any] = {'throttle': {}, 'reset': {}, 'credentials': {}, 'fork': {}}
    with StubS3(BUCKET) as stub, tempfile.TemporaryDirectory() as scratch:
        keys_env = {'AWS_DEFAULT_REGION': 'us-east-1', **{
            k: v for k, v in CREDENTIALS.items() if k != 'AWS_DEFAULT_REGION'}}
        for client in clients:
            for fault in ('throttle', 'reset'):
                key = f'{fault}/{client}'
                outcome = worker(client, 'probe', stub.endpoint, clean_env(home, **keys_env),
                                 timeout, '--keys', key)
                outcome['requests'] = stub.requests(key)
                results[fault][client] = outcome
                _log(f'{fault} {client}: {outcome}')
            results['fork'][client] = worker(client, 'fork', stub.endpoint,
                                             clean_env(home, **keys_env), timeout, '--keys',
                                             f'ok/fork/{client}')
            _log(f'fork {client}: {results["fork"][client]}')
            for case, extra in _credentials_cases(scratch).items():
                key = f'ok/{client}/{re.sub("[^A-Za-z0-9]+", "-", case)}'
                outcome = worker(client, 'probe', stub.endpoint, clean_env(home, **extra),
                                 timeout, '--keys', key)
                outcome['signed_with'] = stub.access_keys(key)
                results['credentials'].setdefault(client, {})[case] = outcome
                _log(f'credentials {case} {client}: {outcome}')
    return results


def markdown(report: dict[str, Any]) -> str:
    """Per link, a table of each client's medians (the tables of docs/storage/transport.md)."""
    lines = []
    for link, clients in report['summary'].items():
        loads = [r['load'].split()[0] for r in report['runs'] if r['link'] == link]
        lines += ['', f'{link} (load {min(loads, key=float)}-{max(loads, key=float)}):', '',
                  '| client | whole MB/s | whole CPU-s/GB | ranged MB/s | ranged CPU-s/GB | '
                  'start-up s |', '|---|---|---|---|---|---|']
        for client, f in clients.items():
            lines.append(f"| {client} | {f['whole_mb_per_s']['median']:.1f} | "
                         f"{f['whole_cpu_s_per_gb']['median']:.2f} | "
                         f"{f['ranged_mb_per_s']['median']:.1f} | "
                         f"{f['ranged_cpu_s_per_gb']['median']:.2f} | "
                         f"{f['startup_s']['median']:.2f} |")
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--store', choices=['s3', 'azure'], default='s3')
    parser.add_argument('--clients', nargs='+', choices=CLIENTS + VARIANTS + AZURE_CLIENTS,
                        help='default: every client of --store')
    parser.add_argument('--links', nargs='*', choices=['loopback', 'proxy', 'kernel'],
                        default=['loopback', 'proxy', 'kernel'])
    parser.add_argument('--profile', choices=sorted(PROFILES), default='same-region')
    parser.add_argument('--objects', type=int, default=48)
    parser.add_argument('--size', type=int, default=4 << 20)
    parser.add_argument('--part', type=int, default=1 << 20, help='ranged GET size')
    parser.add_argument('--in-flight', type=int, default=32)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--timeout', type=float, default=600.0, help='seconds per client run')
    parser.add_argument('--no-probes', action='store_true')
    parser.add_argument('--table', metavar='RESULTS', help='print the tables of a results file')
    parser.add_argument('--out', default=os.path.join(REPO, 'benchmarks', 'results',
                                                      'transport.json'))
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(markdown(json.load(f)))
        return
    args.clients = args.clients or list(AZURE_CLIENTS if args.store == 'azure' else CLIENTS)
    clients = [c for c in args.clients if importlib.util.find_spec(MODULES[c]) is not None]
    missing = sorted(set(args.clients) - set(clients))
    if missing:
        _log(f'not importable here, skipped: {", ".join(missing)} '
             f'(PY=$(bash scripts/transport_env.sh) has them)')
    versions = {}
    for client in clients:
        from importlib import metadata
        dist = {'s3_light': 'shardflow', 'mountpoint': 's3torchconnectorclient',
                'obstore-bytes': 'obstore', 'obstore-azure': 'obstore',
                'azure': 'azure-storage-blob'}.get(
            client, MODULES[client])
        try:
            versions[client] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[client] = 'source tree'
    report: dict[str, Any] = {'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                              'load_before': load(), 'cpus': os.cpu_count(),
                              'versions': versions, 'settings': {
                                  k: getattr(args, k) for k in (
                                      'store', 'profile', 'objects', 'size', 'part', 'in_flight',
                                      'repeats')}}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:
        for link in args.links:
            rows += run_link(link, args, clients, home)
        report['runs'] = rows
        report['summary'] = summarize(rows)
        if not args.no_probes and args.store == 's3':
            report['probes'] = run_probes(clients, home, 60.0)
    report['load_after'] = load()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report['summary'], indent=1))
    _log(f'written to {args.out} (load before {report["load_before"]}, after '
         f'{report["load_after"]})')


if __name__ == '__main__':
    main()
