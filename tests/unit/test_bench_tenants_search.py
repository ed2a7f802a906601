"""The tenants bench's hindsight search (tests/bench/tenants.py least_meeting): the least pinned
dedicated size that meets a deadline, found by bisection, for every threshold."""
from __future__ import annotations

import pytest

from tests.bench.tenants import least_meeting


@pytest.mark.parametrize("high", [0, 1, 2, 7, 64])
def test_the_search_finds_the_least_size_that_meets_for_every_threshold(high):
    for threshold in range(high + 2):   # high + 1: none meets
        asked: list[int] = []

        def met(d: int) -> bool:
            asked.append(d)
            return d >= threshold
        found = least_meeting(met, high)
        assert found == (threshold if threshold <= high else None)
        assert asked[0] == 0   # most runs need none: asked first
        assert len(asked) <= 2 + max(high, 1).bit_length()   # bisection, not every size
