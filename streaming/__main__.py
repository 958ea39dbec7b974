"""``python -m streaming``: the ``streaming`` command line."""

import sys

from streaming.cli.main import main

if __name__ == '__main__':
    sys.exit(main())
