"""Run by test_download_threads_do_no_first_import: which modules the node's download threads
import for the first time.

A DataLoader worker forked while another thread holds a module's import lock deadlocks when it
imports that module itself, so the download threads (started when the dataset is built, before
the workers are forked) must find everything they use already imported. This script builds a
dataset on ``argv[1]`` (a remote) into ``argv[2]`` (local), waits for the node's schedule to
fetch every shard without reading a sample in the main thread, and prints, as JSON, the modules
first imported by threads named ``streaming-*``.
"""

import json
import sys
import threading
import time

seen: list[list[str]] = []


def _hook(event: str, args: tuple) -> None:
    if event == 'import':
        name = threading.current_thread().name
        if name.startswith('streaming-'):
            seen.append([name, str(args[0])])


def main() -> None:
    from streaming import StreamingDataset
    from streaming.cache.shard_cache import LOCAL
    sys.addaudithook(_hook)  # After streaming's own imports: what the threads import later.
    dataset = StreamingDataset(remote=sys.argv[1], local=sys.argv[2], batch_size=8,
                               shuffle=True, **json.loads(sys.argv[3]))
    deadline = time.monotonic() + 120
    while not (dataset.cache.states == LOCAL).all():
        if time.monotonic() > deadline:
            raise SystemExit('the node\'s schedule did not fetch every shard in 120 s')
        time.sleep(0.05)
    print(json.dumps(seen))


if __name__ == '__main__':
    main()
