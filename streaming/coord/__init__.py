"""Node-local coordination of ranks and DataLoader workers through files in shared memory."""

from streaming.coord.namespace import FileLock, Namespace, make_job_token

__all__ = ['FileLock', 'Namespace', 'make_job_token']
