"""How many examples a property test draws: all of them with ``--run-slow`` (``.ci/run``'s full suite),
a quarter (at least 10) in the README's run, as that run takes a sample of each parametrized grid
(tests/conftest.py, which sets :data:`FULL` before any test module is imported).

``@settings(max_examples=examples(200))``: a test's own ``settings`` take precedence over any
Hypothesis profile, so the count is scaled here rather than by a profile.
"""

from __future__ import annotations

#: True when every case runs (``--run-slow``); set by tests/conftest.py's ``pytest_configure``.
FULL = False


def examples(n: int) -> int:
    """``n`` in the full run; ``max(10, n // 4)`` (never more than ``n``) in the README's run."""
    return n if FULL else min(n, max(10, n // 4))
