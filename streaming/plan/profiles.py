"""Link and store profiles for the planner: latency, rates, the store's request limit, prices.

The presets ``same-region`` and ``cross-region`` are the link emulator's profiles
(``benchmarks/linkemu.py``; a test checks they stay equal), with list prices of a public cloud
for egress and GETs so that a plan has a cost. Override any field with ``LinkProfile.replace``
or the CLI's ``--ttfb``, ``--conn-mbps`` ... options.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ['LinkProfile', 'PRESETS', 'get_profile']


@dataclass(frozen=True)
class LinkProfile:
    """What one node's downloads see.

    Attributes:
        ttfb: seconds from a GET to its first byte.
        conn_rate: bytes/s one connection carries.
        link_rate: bytes/s the node's link carries, shared by its connections.
        request_limit: GETs/s the store serves for the whole run (None: no limit); above it,
            requests are throttled (the store answers "slow down").
        price_per_gb: egress price per GiB fetched.
        price_per_1k_gets: price per 1,000 GET requests.
        store_rate: GETs/s the store begins answering, one after another, for the whole run
            (None: each at once, ``ttfb`` after it is sent). A store busy with many requests in
            flight answers later than ``ttfb``: a GET's first byte comes ``ttfb`` after it is
            sent or once the store has begun it, whichever is later (``plan/store.py``).

    """

    ttfb: float
    conn_rate: float
    link_rate: float
    request_limit: float | None = None
    price_per_gb: float = 0.0
    price_per_1k_gets: float = 0.0
    store_rate: float | None = None

    def __post_init__(self) -> None:
        for name in ('ttfb', 'conn_rate', 'link_rate', 'price_per_gb', 'price_per_1k_gets'):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or \
                    (name in ('conn_rate', 'link_rate') and value <= 0):
                kind = 'positive' if 'rate' in name else 'non-negative'
                raise ValueError(f'link profile: `{name}` must be a {kind} number, got '
                                 f'{value!r}')
        for name in ('request_limit', 'store_rate'):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f'link profile: `{name}` must be positive GETs/s or None, got '
                                 f'{value!r}')

    def replace(self, **changes: Any) -> LinkProfile:
        """This profile with the given fields changed (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Same time to first byte and rates as benchmarks/linkemu.py's profiles of the same names;
# prices: inter-region transfer 0.02/GiB, internet egress 0.09/GiB, 0.0004 per 1,000 GETs.
PRESETS: dict[str, LinkProfile] = {
    'same-region': LinkProfile(0.040, 12e6, 96e6, price_per_gb=0.0, price_per_1k_gets=0.0004),
    'cross-region': LinkProfile(0.100, 8e6, 200e6, price_per_gb=0.02, price_per_1k_gets=0.0004),
    'internet': LinkProfile(0.100, 8e6, 200e6, price_per_gb=0.09, price_per_1k_gets=0.0004),
}


def get_profile(name: str) -> LinkProfile:
    """The preset called ``name``; a ValueError lists the presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f'Unknown link profile {name!r}; presets: {", ".join(sorted(PRESETS))}'
                         ) from None
