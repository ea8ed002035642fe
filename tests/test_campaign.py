"""A small mutation campaign (benchmarks/campaign.py, issue 21): no non-equivalent mutant passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


@pytest.mark.slow
def test_small_campaign_misses_no_non_equivalent_mutant():
    from campaign import DEFAULT_KINDS, run_campaign

    counts, misses, done = run_campaign(3, ["float16", "float64"], DEFAULT_KINDS, seed=1)
    assert done == 3
    assert misses == []
    assert counts["(reference)"]["false_alarm"] == 0
    assert sum(c["caught"] for c in counts.values()) > 0
