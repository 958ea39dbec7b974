"""The compiled parts: optional C speed-ups (streaming/order/shuffles/_py1e_skip.c,
streaming/dataset/_copy_spans.c).

Everything else is in pyproject.toml. ``optional=True``: without a C compiler the install goes
on without the extensions, and the library uses its pure-Python/numpy paths (the same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension('streaming.order.shuffles._py1e_skip',
                             ['streaming/order/shuffles/_py1e_skip.c'], optional=True),
                   Extension('streaming.dataset._copy_spans',
                             ['streaming/dataset/_copy_spans.c'], optional=True)])
