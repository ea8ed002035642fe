"""At a NaN entry, one side's limit: the ``one_side`` policy of :class:`symjac.loss._domain.Convention`.

A hinge tested with ``a > 0`` takes a NaN as false: PyTorch's ``multi_margin_loss`` and
``multilabel_margin_loss`` skip every hinge through a NaN logit, so the row's loss and its
derivatives are those of the limit as that entry goes to -inf (a NaN at another class) or to
+inf (at the target). Where a kind's convention takes ``one_side``, an element whose one
non-finite entry is NaN may answer, for its loss and every derivative of its row at once,
the limits at one side (:func:`symjac.loss._families.element_limits`): an infinite limit
exactly, a finite one within the bound at the entry ∓2^64 plus the exact distance between
the two, as at ±inf (:mod:`symjac.verifiers.loss._nonfinite`). Both sides are tried; a row
mixing them is off the convention.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.loss import _numbers
from symjac.loss._bounds import Bounds, ForwardSums
from symjac.loss._evaluate import LossEvaluation, evaluate_checked
from symjac.loss._families import NAN, STAND_IN, Nonfinite, element_limits

#: The policy's name (in :data:`symjac.loss._domain.NAN_POLICIES` and the report's stats).
POLICY = "one_side"


@dataclasses.dataclass
class Sides:
    """Per element with one NaN entry, the limits at -inf and at +inf of that entry, and the
    evaluations (with their bounds) at -2^64 and +2^64 in its place."""

    limits: dict[int, tuple[tuple[Any, list[Any]], tuple[Any, list[Any]]]]
    far: tuple[LossEvaluation, LossEvaluation]
    bounds: tuple[Bounds, Bounds]
    per: int

    @classmethod
    def of(cls, ev: LossEvaluation, split: Nonfinite, l0: Any, u0: Any, dt: np.dtype[Any], values: bool,
           args: dict[int, list[Fraction]]) -> Sides | None:
        """The sides of every element whose one non-finite entry is NaN (None where there is none)."""
        per = ev.template.classes if ev.kind.class_axis else 1
        codes = split.codes.reshape(-1, per)
        limits = {}
        for i in np.flatnonzero(split.elements):
            bad = np.flatnonzero(codes[i] != 0)
            if bad.size == 1 and codes[i, bad[0]] == NAN:
                slot = int(bad[0])
                limits[int(i)] = tuple(element_limits(ev.loss, ev.template, args[int(i)], slot, s) for s in (-1, 1))
        if not limits:
            return None
        far, bounds = [], []
        for s in (-1, 1):
            standin = np.where(split.codes == NAN, s * STAND_IN, split.standin)
            got = evaluate_checked(ev.loss, standin, l0, u0, values=values, derivatives=True)
            far.append(got)
            bounds.append(Bounds(got, dt))
        return cls(limits, (far[0], far[1]), (bounds[0], bounds[1]), per)  # type: ignore[arg-type]

    def rows_on_one_side(self, arr: np.ndarray, scaled: Callable[[int], Any]) -> set[int]:
        """The elements whose every derivative entry in ``arr`` (flat, floats) is the limit at one side."""
        flat = arr.reshape(-1)
        out = set()
        for i, both in self.limits.items():
            for s in (0, 1):
                far = self.far[s].derivative().reshape(-1)
                entries = np.arange(i * self.per, (i + 1) * self.per)
                bound = self.bounds[s].derivative(self.far[s].loss.scale, entries)
                lams = both[s][1]
                if all(lam is not None and _near(float(flat[j]), scaled(int(j)) * _numbers.from_mpf(lam), far[j],
                                                 bound[k]) for k, (j, lam) in enumerate(zip(entries, lams))):
                    out.add(i)
        return out

    def loss_on_one_side(self, i: int, o: float) -> bool:
        """Is a ``"none"`` forward's element i the loss's limit at one side?"""
        for s in (0, 1):
            lam = self.limits[i][s][0]
            if lam is None:
                continue
            b = self.bounds[s]
            b.fill(np.array([i]), of="loss")
            far = self.far[s].elements.reshape(-1)[i]
            if _near(o, _numbers.from_mpf(lam), far, b.element(far, b.cond[i], b.run[i])):
                return True
        return False

    def reduced_test(self, fixed: dict[int, Any], den: Fraction) -> Callable[[float], bool] | None:
        """A test ``o -> bool`` of a reduced forward: the reduced loss with every other affected element
        at its limit (``fixed``: element -> ℓ's limit, mpmath) and every NaN element at one of its sides'
        limits (each choice tried); None where no choice has a limit."""
        elements = sorted(self.limits)
        far0 = self.far[0].elements.reshape(-1)
        phi0, bound = ForwardSums(self.bounds[0], full=True).at()
        targets: list[Any] = []
        for choice in itertools.product((0, 1), repeat=len(elements)):
            lams = dict(fixed)
            lams.update({i: self.limits[i][s][0] for i, s in zip(elements, choice)})
            if any(lam is None for lam in lams.values()):
                continue
            infinite = {float(lam) > 0 for lam in lams.values() if not math.isfinite(float(lam))}
            if len(infinite) > 1:
                continue
            if infinite:
                targets.append(math.inf if infinite.pop() else -math.inf)
                continue
            phi = phi0
            for i, lam in lams.items():
                phi = phi + (_numbers.from_mpf(lam) - far0[i]) / _numbers.number(den)
            targets.append(phi)
        if not targets:
            return None

        def test(o: float) -> bool:
            for t in targets:
                if isinstance(t, float) and math.isinf(t):
                    if o == t:
                        return True
                elif abs(_numbers.number(o) - t) <= bound:
                    return True
            return False

        return test


def _near(o: float, lam: Any, far: Any, bound: Any) -> bool:
    """Is ``o`` the limit ``lam``: the same infinity, or within ``bound`` at ±2^64 plus the distance there?"""
    if not _numbers.finite(np.array([lam], dtype=object))[0]:
        return bool(_numbers.number(o) == lam)
    return bool(abs(_numbers.number(o) - lam) <= bound + abs(lam - far))


__all__ = ["POLICY", "Sides"]
