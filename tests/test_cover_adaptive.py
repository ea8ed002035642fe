"""Adaptive pooling's coverage plan reaches every window rule (issue 34, deliverable 4).

The issue: the plan of ``AdaptivePool("avg", (5,))`` held L = 5, 10, 11 only, and a backward
with fixed-width windows ``ceil(L/o)`` instead of PyTorch's ``[floor(iL/o), ceil((i+1)L/o))``
agreed at all three and passed (it differs at L = 7, 8). Here each plausible wrong rule is
written out (the derivation of where each parts from PyTorch's is in the module doc of
``symjac/pool/_cover.py``), and (1) over o = 1..48 every rule that parts from PyTorch's at
some L <= 5o + 3 parts at a length of the plan, (2) the "iff" conditions of the derivation hold,
(3) NumPy implementations planting each rule fail ``symjac.verify`` at its defaults (no shape),
in avg and max, 1-D and 2-D, and the correct one passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

import symjac
from symjac import AdaptivePool

Windows = list[tuple[int, int]]
Rule = Callable[[int, int], Windows]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def torch_rule(L: int, o: int) -> Windows:
    """PyTorch's (aten/src/ATen/native/AdaptivePooling.h: start_index = floor(a*b/c),
    end_index = ceil((a+1)*b/c))."""
    return [(i * L // o, _cdiv((i + 1) * L, o)) for i in range(o)]


def _round_half_up(a: int, b: int) -> int:
    """a/b rounded to nearest, ties up: floor((2a + b) / 2b)."""
    return (2 * a + b) // (2 * b)


def _round_half_even(a: int, b: int) -> int:
    """a/b rounded to nearest, ties to even (Python's ``round``)."""
    q, rem = divmod(a, b)
    return q + (2 * rem > b or (2 * rem == b and q % 2 == 1))


#: The wrong rules (module doc of symjac/pool/_cover.py, "Adaptive pooling"): window i as (start, end).
WRONG: dict[str, Rule] = {
    "fixed width ceil(L/o)": lambda L, o: [(i * L // o, i * L // o + _cdiv(L, o)) for i in range(o)],
    "fixed width floor(L/o)": lambda L, o: [(i * L // o, i * L // o + L // o) for i in range(o)],
    "stride floor(L/o), width ceil(L/o)": lambda L, o: [(i * (L // o), i * (L // o) + _cdiv(L, o)) for i in range(o)],
    "downsampling formula": lambda L, o: [(i * (L // o), i * (L // o) + L - (o - 1) * (L // o)) for i in range(o)],
    "stride ceil(L/o)": lambda L, o: [(i * _cdiv(L, o), (i + 1) * _cdiv(L, o)) for i in range(o)],
    "round half up": lambda L, o: [(_round_half_up(i * L, o), _round_half_up((i + 1) * L, o)) for i in range(o)],
    "round half even": lambda L, o: [(_round_half_even(i * L, o), _round_half_even((i + 1) * L, o)) for i in range(o)],
    "floor end": lambda L, o: [(i * L // o, (i + 1) * L // o) for i in range(o)],
    "ceil start": lambda L, o: [(_cdiv(i * L, o), _cdiv((i + 1) * L, o)) for i in range(o)],
    "ceil start, floor end": lambda L, o: [(_cdiv(i * L, o), (i + 1) * L // o) for i in range(o)],
    "ceil as floor + 1": lambda L, o: [(i * L // o, (i + 1) * L // o + 1) for i in range(o)],
    "nearest cell when upsampling": lambda L, o: (torch_rule(L, o) if L >= o
                                                  else [(i * L // o, i * L // o + 1) for i in range(o)]),
    "downsampling formula when upsampling": lambda L, o: (torch_rule(L, o) if L >= o else [(0, L)] * o),
    "numpy array_split": lambda L, o: [(i * (L // o) + min(i, L % o), (i + 1) * (L // o) + min(i + 1, L % o))
                                       for i in range(o)],
}


def _from_o_on(rule: Rule) -> Rule:
    """``rule`` applied from L = o on only (exact below o: a kernel that special-cases upsampling)."""
    return lambda L, o: rule(L, o) if L >= o else torch_rule(L, o)


WRONG.update({f"{name}, from o on": _from_o_on(rule) for name, rule in list(WRONG.items()) if "upsampling" not in name})


def windows(rule: Rule, L: int, o: int) -> Windows:
    """The cells an implementation following ``rule`` reads: clipped to [0, L) (reading outside the
    input is another bug, which the clip hides, so this is the rule's hardest form to catch)."""
    return [(max(s, 0), min(e, L)) for s, e in rule(L, o)]


def parts(rule: Rule, L: int, o: int) -> bool:
    return windows(rule, L, o) != torch_rule(L, o)


def plan_lengths(o: int) -> list[int]:
    return sorted({sh[2] for sh in symjac.cover(AdaptivePool("avg", (o,))) if sh[:2] == (2, 3)})


def test_torch_rule_is_symjacs_geometry():
    # The oracle above is the geometry symjac verifies against, at lengths above and below o.
    for o in (1, 2, 3, 5, 7):
        for L in range(1, 3 * o + 3):
            g = symjac.resolve(AdaptivePool("avg", (o,)), (L,))
            ax = g.axes[0]
            assert list(zip(ax.starts.tolist(), (ax.starts + ax.sizes).tolist())) == torch_rule(L, o), (L, o)


def test_the_issues_plan_of_output_5():
    # o = 5: L = o - 1, o, 2o - 1, 2o + 1 = 4, 5, 9, 11 (the issue's plan was 5, 10, 11)
    assert plan_lengths(5) == [4, 5, 9, 11]
    assert not any(parts(WRONG["fixed width ceil(L/o)"], L, 5) for L in (5, 10, 11))  # the issue's miss
    assert [L for L in range(1, 12) if parts(WRONG["fixed width ceil(L/o)"], L, 5)] == [2, 3, 4, 7, 8, 9]


@pytest.mark.parametrize("name", sorted(WRONG))
def test_every_wrong_rule_parts_at_the_plan_whenever_it_parts(name):
    rule, missed = WRONG[name], []
    for o in range(1, 49):
        where = [L for L in range(1, 5 * o + 4) if parts(rule, L, o)]
        if where and not any(parts(rule, L, o) for L in plan_lengths(o)):
            missed.append((o, where[:6]))
    assert not missed, f"{name}: the plan misses it at (o, lengths where it parts) {missed[:5]}"


def test_the_rounding_helpers_round_as_python_does():
    from fractions import Fraction

    for a in range(0, 40):
        for b in range(1, 9):
            assert _round_half_even(a, b) == round(Fraction(a, b))
            assert _round_half_up(a, b) == math.floor(Fraction(a, b) + Fraction(1, 2))


def test_where_the_rules_part_is_as_derived():
    # Module doc of symjac/pool/_cover.py: with L = q*o + r, each "iff".
    for o in range(1, 41):
        for L in range(1, 5 * o + 4):
            r = L % o
            assert parts(WRONG["fixed width ceil(L/o)"], L, o) == (o % r != 0 if r else False), (L, o)
            assert parts(WRONG["fixed width floor(L/o)"], L, o) == (r != 0), (L, o)
            assert parts(WRONG["downsampling formula"], L, o) == (r >= 2), (L, o)
            assert parts(WRONG["stride floor(L/o), width ceil(L/o)"], L, o) == (r >= 2), (L, o)
            assert parts(WRONG["floor end"], L, o) == (r != 0), (L, o)
            assert parts(WRONG["ceil start"], L, o) == (r != 0), (L, o)
            assert parts(WRONG["ceil as floor + 1"], L, o) == (math.gcd(L, o) > 1), (L, o)
            assert parts(WRONG["nearest cell when upsampling"], L, o) == (L < o and o % L != 0), (L, o)


class RulePool:
    """Adaptive avg/max pooling (N, C, *spatial), 1-D or 2-D, reading the windows of ``rule``
    along each axis; max routes a window's gradient to its first maximal cell (PyTorch)."""

    def __init__(self, mode: str, output_size: tuple[int, ...], rule: Rule):
        self.mode, self.output_size, self.rule = mode, output_size, rule

    def _windows(self, spatial: tuple[int, ...]):
        per_axis = [windows(self.rule, L, o) for L, o in zip(spatial, self.output_size)]
        for pos in np.ndindex(*self.output_size):
            yield pos, tuple(slice(*per_axis[a][p]) for a, p in enumerate(pos))

    def forward(self, x: np.ndarray) -> np.ndarray:
        y = np.zeros(x.shape[:2] + self.output_size, dtype=x.dtype)
        for pos, box in self._windows(x.shape[2:]):
            cells = x[(slice(None), slice(None)) + box].reshape(x.shape[:2] + (-1,))
            if cells.shape[-1]:  # an empty window (a floor rule upsampling) gives 0
                y[(slice(None), slice(None)) + pos] = cells.max(-1) if self.mode == "max" else cells.mean(-1)
        return y

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        dx = np.zeros_like(x)
        for pos, box in self._windows(x.shape[2:]):
            region = (slice(None), slice(None)) + box
            cells = x[region].reshape(x.shape[:2] + (-1,))
            if not cells.shape[-1]:
                continue
            g = dy[(slice(None), slice(None)) + pos][..., None]
            if self.mode == "max":
                share = np.where(np.arange(cells.shape[-1]) == cells.argmax(-1)[..., None], g, 0)
            else:
                share = np.broadcast_to(g / cells.shape[-1], cells.shape)
            dx[region] += share.reshape(x[region].shape)
        return dx


def _verify(mode: str, output_size: tuple[int, ...], rule: Rule) -> symjac.Report:
    impl = RulePool(mode, output_size, rule)
    return symjac.verify(AdaptivePool(mode, output_size), backward=impl.backward, forward=impl.forward)


@pytest.mark.parametrize("output_size", [(5,), (3, 4)])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_the_right_rule_passes_at_defaults(mode, output_size):
    report = _verify(mode, output_size, torch_rule)
    assert report.ok, report.summary()


PLANTED = [n for n in sorted(WRONG) if "from o on" not in n] + ["fixed width ceil(L/o), from o on",
                                                                 "round half up, from o on"]


@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_every_planted_rule_fails_at_defaults(mode, name):
    # the issue's o = 5 (on main the fixed-width rule passed here)
    report = _verify(mode, (5,), WRONG[name])
    assert not report.ok, (name, report.summary())


@pytest.mark.slow
@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_every_planted_rule_fails_at_defaults_in_2d(mode, name):
    # (3, 4): o = 3 and 4 part from fixed widths at L = 2, 5 and 3, 7 (one axis suffices)
    report = _verify(mode, (3, 4), WRONG[name])
    assert not report.ok, (name, report.summary())
