"""Epoch numbering and resumption, shared by a rank's DataLoader workers on the node.

Each pass over the data (a *session*: one DataLoader iterator, or one ``iter(dataset)``) is one
epoch. The workers of a session share a key: torch draws one base seed per iterator and gives
worker ``i`` the seed ``base + i``; persistent workers, which keep that seed, add how many passes
they have started. The first worker of a session to arrive takes the rank's next epoch number
and records it under the key; the others look it up. So the number of workers may change from
one DataLoader to the next, and workers may be fresh or persistent, and all agree.

``load_state_dict`` publishes a resume record with a new generation number; the next session
applies it, however many epochs the rank has run (the reference ignores it then: a silent no-op).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from streaming.coord import SharedDir
from streaming.fileio import atomic_write

__all__ = ['EpochState', 'epoch_arrays', 'ResumeRecord']

_SESSIONS = 64  # Sessions remembered per rank; only the current one is ever looked up.


def epoch_arrays(local_world_size: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the epoch state needs, for the ``SharedDir`` to create."""
    ranks = local_world_size
    return {'next_epoch': ('int64', (ranks,)), 'resume_applied': ('int64', (ranks,)),
            'current_epoch': ('int64', (ranks, 2)),
            'sessions': ('int64', (ranks, _SESSIONS, 3)), 'session_cursor': ('int64', (ranks,)),
            'resume_generation': ('int64', (1,))}


@dataclass(frozen=True)
class ResumeRecord:
    """Where to resume: an epoch, the samples of it already consumed, and how it was laid out."""

    epoch: int
    sample_in_epoch: int
    num_canonical_nodes: int | None = None
    shuffle_seed: int | None = None
    initial_physical_nodes: int | None = None

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ResumeRecord:
        if not isinstance(state, dict):
            raise ValueError(f'load_state_dict expects the dict from state_dict(), got '
                             f'{type(state).__name__}.')
        missing = {'epoch', 'sample_in_epoch'} - set(state)
        if missing:
            raise ValueError(f'load_state_dict: the state lacks {sorted(missing)}; expected the '
                             f'dict returned by state_dict().')
        epoch, sample_in_epoch = int(state['epoch']), int(state['sample_in_epoch'])
        if epoch == -1:
            # The reference's state before any iteration, which the reference itself ignores
            # whole: start at the beginning with this dataset's own layout (seed, nodes).
            return cls(0, 0)
        record = cls(epoch, sample_in_epoch,
                     state.get('num_canonical_nodes'), state.get('shuffle_seed'),
                     state.get('initial_physical_nodes'))
        if record.epoch < 0 or record.sample_in_epoch < 0:
            raise ValueError(f'load_state_dict: epoch and sample_in_epoch must be >= 0, got '
                             f'{record.epoch} and {record.sample_in_epoch}.')
        return record


class EpochState:
    """The epoch counter, sessions and pending resume record of one rank of one dataset."""

    def __init__(self, shared: SharedDir, local_rank: int) -> None:
        self.shared = shared
        self.rank = local_rank

    def _array(self, name: str) -> Any:
        return self.shared.array(name)

    def _resume_path(self) -> str:
        return self.shared.file_path(f'resume-{self.rank}.json')

    def publish_resume(self, record: ResumeRecord) -> None:
        """Make this rank's next session resume from ``record``."""
        with self.shared.lock('epoch'):
            generation = int(self._array('resume_generation')[0]) + 1
            atomic_write(self._resume_path(),
                         json.dumps({'generation': generation, **asdict(record)}))
            self._array('resume_generation')[0] = generation

    def next_epoch(self) -> int:
        return int(self._array('next_epoch')[self.rank])

    def set_next_epoch(self, epoch: int) -> None:
        with self.shared.lock('epoch'):
            self._array('next_epoch')[self.rank] = epoch

    def _read_resume(self) -> tuple[int, ResumeRecord] | None:
        """(generation, record) of the latest ``load_state_dict`` on this rank, if any."""
        try:
            with open(self._resume_path()) as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        generation = data.pop('generation')
        return generation, ResumeRecord(**data)

    def peek_pending(self, apply: bool = False) -> ResumeRecord | None:
        """The resume record the next session will apply, if any; ``apply`` marks it applied."""
        latest = self._read_resume()
        if latest is None or latest[0] <= self._array('resume_applied')[self.rank]:
            return None
        if apply:
            self._array('resume_applied')[self.rank] = latest[0]
        return latest[1]

    def begin_session(self, key: int) -> tuple[int, int, ResumeRecord | None]:
        """(epoch, samples to skip, resume record applied) for the session ``key``."""
        rank = self.rank
        with self.shared.lock('epoch'):
            sessions = self._array('sessions')[rank]
            for stored_key, epoch, start in sessions.tolist():
                if stored_key == key:
                    record = self._pending_for_session(epoch, start)
                    return epoch, start, record
            record = self.peek_pending(apply=True)
            if record is not None:
                epoch, start = record.epoch, record.sample_in_epoch
            else:
                epoch, start = int(self._array('next_epoch')[rank]), 0
            self._array('next_epoch')[rank] = epoch + 1
            self._array('current_epoch')[rank] = (epoch, start)
            cursor = int(self._array('session_cursor')[rank])
            sessions[cursor % _SESSIONS] = (key, epoch, start)
            self._array('session_cursor')[rank] = cursor + 1
            return epoch, start, record

    def _pending_for_session(self, epoch: int, start: int) -> ResumeRecord | None:
        """Later workers of a resumed session need the record's layout too: re-read it."""
        latest = self._read_resume()
        if latest is None:
            return None
        record = latest[1]
        return record if (record.epoch, record.sample_in_epoch) == (epoch, start) else None

    def current(self) -> tuple[int, int]:
        """(epoch of this rank's latest session, samples that session skipped at its start).

        Before any session: (the next epoch - 1, 0), as the reference (-1 on a fresh dataset).
        """
        if int(self._array('session_cursor')[self.rank]) == 0:
            return int(self._array('next_epoch')[self.rank]) - 1, 0
        epoch, start = self._array('current_epoch')[self.rank].tolist()
        return epoch, start
