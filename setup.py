"""The one compiled part: an optional C speed-up (streaming/order/shuffles/_py1e_skip.c).

Everything else is in pyproject.toml. ``optional=True``: without a C compiler the install goes
on without the extension, and the library uses its pure-numpy path (the same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension('streaming.order.shuffles._py1e_skip',
                             ['streaming/order/shuffles/_py1e_skip.c'], optional=True)])
