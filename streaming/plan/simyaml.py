"""The reference simulator's YAML input files, read into a plan's settings.

Those files are training configurations (Composer / LLM Foundry style): a global batch size,
``max_duration`` (``2ep`` or ``1000ba``), the train loader's ``num_workers`` and its dataset's
streaming arguments (``remote``/``local``/``split`` or ``streams``, ``predownload``,
``cache_limit``, ``num_canonical_nodes``, ``shuffle``, ``shuffle_algo``, ``shuffle_seed``,
``shuffle_block_size``), optionally under ``parameters:``, with the loader either as
``train_loader: {num_workers, dataset}`` or ``dataset: {train_dataset: {streaming_kwargs,
dataloader_kwargs}}``; ``compute: {gpus}`` gives the device count. Nodes and devices per node
come from the command line, as in the reference's ``sim_cli``. Needs PyYAML (the ``plan`` extra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streaming.storage.errors import MissingDependencyError

__all__ = ['SimulatorYaml', 'read_simulator_yaml']


@dataclass
class SimulatorYaml:
    """What a simulator YAML says about the run (see the module doc)."""

    urls: list[str]
    proportions: list[float] | None
    global_batch_size: int
    workers: int
    epochs: int | None
    batches: int | None
    gpus: int | None
    dataset: dict[str, Any] = field(default_factory=dict)

    def settings(self, nodes: int, ranks_per_node: int | None, total_samples: int
                 ) -> dict[str, Any]:
        """``RunSettings`` keyword arguments for ``nodes`` nodes (devices: given or ``gpus``)."""
        if ranks_per_node is None:
            if not self.gpus or self.gpus % nodes:
                raise ValueError(f'simulator YAML: give --ranks-per-node (compute.gpus is '
                                 f'{self.gpus!r}, not a multiple of {nodes} nodes)')
            ranks_per_node = self.gpus // nodes
        devices = nodes * ranks_per_node
        if self.global_batch_size % devices:
            raise ValueError(f'simulator YAML: global batch size {self.global_batch_size} is '
                             f'not a multiple of the {devices} devices')
        batch = self.global_batch_size // devices
        epochs = self.epochs or max(1, math.ceil((self.batches or 0) * self.global_batch_size /
                                                 max(1, total_samples)))
        d = self.dataset
        return {'nodes': nodes, 'ranks_per_node': ranks_per_node, 'workers': self.workers,
                'batch_size': batch, 'epochs': epochs, 'proportions': self.proportions,
                'shuffle': bool(d.get('shuffle', False)),
                'shuffle_algo': d.get('shuffle_algo') or 'py1e',
                'shuffle_block_size': d.get('shuffle_block_size'),
                'num_canonical_nodes': d.get('num_canonical_nodes'),
                'seed': int(d.get('shuffle_seed', 9176)),
                'cache_limit': d.get('cache_limit'), 'predownload': d.get('predownload')}


def _join(base: str, split: str | None) -> str:
    return base.rstrip('/') + '/' + split if split else base


def _urls(dataset: dict[str, Any], where: str) -> tuple[list[str], list[float] | None]:
    """Each stream's location (remote, else local) and proportions (None: not all given)."""
    split = dataset.get('split')
    remote, local = dataset.get('remote'), dataset.get('local')
    if isinstance(remote, list) or isinstance(local, list):
        places: list[Any] = remote if isinstance(remote, list) else local  # type: ignore
        return [_join(str(p), split) for p in places], None
    streams = dataset.get('streams')
    if isinstance(streams, dict) and streams:
        urls, shares = [], []
        for name, stream in streams.items():
            if not isinstance(stream, dict) or not (stream.get('remote') or stream.get('local')):
                raise ValueError(f'simulator YAML {where}: stream {name!r} has no remote or '
                                 f'local')
            urls.append(_join(str(stream.get('remote') or stream.get('local')),
                              stream.get('split', split)))
            shares.append(stream.get('proportion'))
        given = [float(s) for s in shares if s is not None]
        return urls, (given if len(given) == len(shares) else None)
    if remote or local:
        return [_join(str(remote or local), split)], None
    raise ValueError(f'simulator YAML {where}: the train dataset has no remote, local or '
                     f'streams')


def _duration(value: Any, where: str) -> tuple[int | None, int | None]:
    text = str(value).strip().lower()
    for suffix, is_epochs in (('ep', True), ('ba', False)):
        if text.endswith(suffix) and text[:-len(suffix)].isdigit():
            count = int(text[:-len(suffix)])
            return (count, None) if is_epochs else (None, count)
    raise ValueError(f'simulator YAML {where}: max_duration {value!r} must be epochs (2ep) or '
                     f'batches (1000ba)')


def read_simulator_yaml(path: str) -> SimulatorYaml:
    """Parse ``path``; a ValueError names the file and what is missing or wrong."""
    try:
        import yaml
    except ImportError as error:
        raise MissingDependencyError(
            f'reading the simulator YAML {path} needs PyYAML, which is not installed; install '
            f'it with: pip install "shardflow[plan]"') from error
    with open(path) as f:
        try:
            config = yaml.safe_load(f)
        except yaml.YAMLError as error:
            raise ValueError(f'simulator YAML {path}: not valid YAML ({error})') from None
    if not isinstance(config, dict):
        raise ValueError(f'simulator YAML {path}: expected a mapping at the top')
    gpus = (config.get('compute') or {}).get('gpus')
    config = config.get('parameters', config)
    batch = config.get('global_train_batch_size', config.get('batch_size'))
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f'simulator YAML {path}: needs global_train_batch_size (or batch_size) '
                         f'as a positive integer, got {batch!r}')
    if isinstance(config.get('train_loader'), dict):
        loader = config['train_loader']
        workers = int(loader.get('num_workers', 1))
        dataset = loader.get('dataset')
    elif isinstance(config.get('dataset'), dict) and \
            isinstance(config['dataset'].get('train_dataset'), dict):
        dataset = dict(config['dataset']['train_dataset'])
        dataset.update(dataset.get('streaming_kwargs') or {})
        workers = int((dataset.get('dataloader_kwargs') or {}).get('num_workers', 1))
    else:
        raise ValueError(f'simulator YAML {path}: needs train_loader.dataset or '
                         f'dataset.train_dataset')
    if not isinstance(dataset, dict):
        raise ValueError(f'simulator YAML {path}: the train dataset must be a mapping')
    duration = config.get('max_duration', (config.get('trainer') or {}).get('max_duration'))
    if duration is None:
        raise ValueError(f'simulator YAML {path}: needs max_duration')
    epochs, batches = _duration(duration, path)
    urls, proportions = _urls(dataset, path)
    return SimulatorYaml(urls, proportions, batch, workers, epochs, batches, gpus, dataset)
