"""Node-local coordination of ranks and DataLoader workers through files in shared memory.

``SharedDir`` (one directory of shared arrays, locks and files per dataset per node),
``FileLock`` (a kernel ``flock``), ``Lease`` (a role one process of the node holds at a time),
``DirectoryLock`` (one writer per output directory) and ``make_job_token`` (the name ranks of
one job agree on). Every ``flock`` of the package is taken here (``coord.lock``), and every
shared-memory structure lives here: the shared directory's arrays, and ``coord.ring``, the
ring of batch slots a DataLoader worker shares with its main process.
"""

from streaming.coord.dir_lock import DirectoryLock
from streaming.coord.lock import FileLock, Lease
from streaming.coord.shared_dir import SharedDir, base_dir, find_stale, sweep_stale
from streaming.coord.token import make_job_token

__all__ = ['DirectoryLock', 'FileLock', 'Lease', 'SharedDir', 'base_dir', 'find_stale',
           'make_job_token', 'sweep_stale']
