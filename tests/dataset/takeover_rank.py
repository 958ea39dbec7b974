"""One rank of the takeover test (test_prefetch_takeover.py): reads its part of an epoch.

Prints ``BUILT <runs the schedule>`` once the dataset is built and ``READ <n>`` after each sample;
writes ``{"ids": [...], "took_schedule": bool}`` to the path given as its second argument.
"""

import json
import sys

from streaming import StreamingDataset


def main() -> None:
    remote, out, local = sys.argv[1], sys.argv[2], sys.argv[3]
    dataset = StreamingDataset(remote=remote, local=local, batch_size=4, shuffle=True,
                               download_retry=1, download_timeout=30)
    prefetch = dataset._node_prefetch()
    print('BUILT', bool(prefetch and prefetch.running), flush=True)
    ids, took = [], False
    for n, sample in enumerate(dataset):
        ids.append(int(sample['id']))
        # Whether this process ever started the node's schedule (it may end before the next
        # sample: sampling ``running`` alone raced with a short leftover schedule).
        took = took or bool(prefetch and (prefetch.running or prefetch._thread is not None))
        print('READ', n + 1, flush=True)
    with open(out, 'w') as f:
        json.dump({'ids': ids, 'took_schedule': took, 'length': len(dataset)}, f)


if __name__ == '__main__':
    main()
