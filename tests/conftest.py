"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread while a module runs (its tests make thousands of tiny
    ops, where intra-op threads only add wake-up latency on a busy 2-core machine);
    the previous count is restored afterwards. Use: ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
