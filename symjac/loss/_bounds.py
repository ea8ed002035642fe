"""The rounding-error bounds of a loss evaluation: what a correct implementation in a
dtype may be off by, per derivative entry and for the forward.

No tolerance here is guessed. With ``u`` the unit roundoff of the dtype
(2^-11, 2^-24, 2^-53), ``η`` its smallest subnormal and ``γ_k = k·u/(1 - k·u)``:

*Derivative.* The emitted value is ``g_j = S·r_i·h_j`` with ``h_j = dℓ_i/dz_j`` (the
SymPy derivative) and ``r_i`` the exact reduction factor (1/D, 1/B, 1 or the
upstream ``u_i``). The bound has two first-order parts, both computed exactly
(MPFR, :mod:`symjac.loss._numbers`) from SymPy expressions at the input::

    B_j = |S·r_i| · [ u·R(h_j) + γ_k·(|h_j| + Σ_m |∂h_j/∂x_m|·|x_m|) ]  +  k·η·max(1, |S·r_i|·A)

1. ``R(h_j)`` is the running error bound of evaluating ``h_j`` as SymPy wrote it
   (:func:`symjac.losses.running_error`; Wilkinson, Higham *Accuracy and
   Stability*, §3.3): every operation's rounding times the magnitude it acts on,
   propagated to the result. It charges cancellation between large
   intermediates (``softmax - 1`` near p = 1, ``σ(z)(1-y+p·y) - p·y`` near a
   minimum), which every algorithm that forms those intermediates pays.
2. ``γ_k·(|h| + Σ_m |∂h/∂x_m|·|x_m|)`` is the first-order error of a *mixed
   stable* evaluation with constant ``k`` (Higham §1.5): the exact ``h`` at inputs
   perturbed componentwise by ``γ_k``, times ``(1 + θ)``, ``|θ| <= γ_k``. Every
   input ``x_m`` counts (prediction, label, weights, ε, δ). This covers
   algorithms that reformulate before evaluating (log-sum-exp shifted by
   ``max z``, sigmoid through ``exp(-|z|)``, ``ε`` rounded to the dtype): a shift
   ``z - m`` rounds to relative ``u``, charged as ``|∂h/∂z|·|z|``.
   ``k = depth(ℓ) + depth(h) + k_r``, ``depth`` (:func:`symjac.losses.rounding_depth`)
   the most roundings on any input-to-result path of the SymPy expression (an
   n-term sum n - 1, exp/log 2 since libm is within 1 ulp); ``depth(ℓ)`` is added
   because reverse-mode AD forms ``h`` from the forward's intermediates; ``k_r`` = 2
   (times S, times the reduction factor) + the roundings of a float weight sum D
   (``n`` for a weighted mean) + 1 if D is not representable.
3. The last term is the underflow part of the standard model
   ``fl(a∘b) = (a∘b)(1+δ) + ε``, ``|ε| <= η/2``, each of the ``k`` operations' ``ε``
   reaching the result through at most the scale, the reduction factor and
   ``A`` = max(1, |weights|, 1/δ for smooth_l1).

This is a model of a correct implementation, not a theorem about every
algorithm: an implementation whose own cancellation exceeds both parts is
reported. Against PyTorch 2.13 (260 generated cases in
``tests/test_losses_torch.py``) the largest observed error is well inside it.
At a kink the Clarke set ``[lo, hi]`` replaces ``h_j`` (``max(|lo|, |hi|)`` for
``|h_j|``) and any value in ``[lo - B_j, hi + B_j]`` passes.

*Loss value* (the forward). Per element ``e_i = u·R(ℓ_i) + γ_{depth(ℓ)}·(|ℓ_i| +
Σ_m |∂ℓ_i/∂x_m|·|x_m|)`` (+ underflow); for a reduced loss ``L = Σ_i ℓ_i / D``::

    |L̂ - L| <= Σ_i e_i/D + γ_{n-1}·Σ_i |ℓ_i|/D + γ_{k_D+1}·|L|  (+ underflow)

(recursive summation of the n counted elements, then the division by D).

*Cost.* ``R`` and the condition sums are most of the work (their SymPy forms are
the largest), and every bound above is at least its *floor*, the same formula with
both set to 0. A value within its floor is within its bound, so the full bound is
formed only for the values beyond their floor, the worst value, the probed entries
and their stencil points, and on the failure paths (a scale to name, a forward
beyond its floor); the verdicts are those of the full bound everywhere.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from symjac.check._rounding import finfo, gamma_mp, unit_roundoff_mp
from symjac.loss import _numbers
from symjac.loss._elements import element_values
from symjac.loss._evaluate import LossEvaluation
from symjac.loss._kind import Template


def derivative_roundings(tpl: Template, denominator: Fraction, denominator_ops: int, dt: np.dtype[Any]) -> int:
    """``k`` of the derivative bound: ``depth(ℓ) + depth(h) + k_r`` (see the module docstring)."""
    p = int(finfo(dt).nmant) + 1
    representable = denominator.denominator == 1 and denominator.numerator <= 2**p
    k_r = 2 + denominator_ops + (0 if representable else 1)
    return int(tpl.loss_depth + tpl.derivative_depth + k_r)


class Bounds:
    """Per-dtype bound machinery for one evaluation, in MPFR.

    The condition sums and running errors (``cond``, ``run``) cost most of an
    evaluation, and a correct value is within the *floor* of its bound (both set to 0):
    they are computed only for the elements a verdict needs (:meth:`fill`). Every bound
    is at least its floor, so a value within the floor passes under the full bound too.
    """

    def __init__(self, ev: LossEvaluation, dt: np.dtype[Any]):
        self.ev, self.dt = ev, dt
        tpl = ev.template
        self.k_loss, self.k_deriv = tpl.loss_depth, derivative_roundings(tpl, ev.denominator, ev.denominator_ops, dt)
        with _numbers.context():
            amp = _numbers.number(1)
            for col in ev.columns[len(tpl.pred) + len(tpl.label):]:
                amp = max([amp] + [abs(v) for v in {id(v): v for v in col}.values()])
            extra = ev.kind.amplitude(ev.loss)  # the kind's rounding model (smooth_l1: 1/δ)
            if extra is not None:
                amp = max(amp, extra)
            self.u, self.amp = unit_roundoff_mp(dt), amp
            self.eta = _numbers.number(float(finfo(dt).smallest_subnormal))
        n, classes = ev.counted.size, tpl.classes
        if ev.element_cond is not None and ev.element_run is not None and ev.h_cond is not None \
                and ev.h_run is not None:
            self.known = {"loss": np.ones(n, dtype=bool), "derivative": np.ones(n, dtype=bool)}
            self.cond, self.run = ev.element_cond.reshape(-1), ev.element_run.reshape(-1)
            self.h_cond, self.h_run = ev.h_cond.reshape(n, classes), ev.h_run.reshape(n, classes)
        else:
            ignored = ~ev.counted.reshape(-1)  # ignored rows: no error at all
            self.known = {"loss": ignored.copy(), "derivative": ignored.copy()}
            self.cond, self.run = _numbers.zeros((n,)), _numbers.zeros((n,))
            self.h_cond, self.h_run = _numbers.zeros((n, classes)), _numbers.zeros((n, classes))

    def fill(self, elements: np.ndarray | None = None, of: str = "derivative") -> None:
        """Compute cond and run (``of`` the loss or the derivative) of the given flat
        elements (all if None) where not known yet."""
        known = self.known[of]
        need = np.flatnonzero(~known) if elements is None else np.unique(elements[~known[elements]])
        if not need.size:
            return
        got = element_values(self.ev.template, [c[need] for c in self.ev.columns], values=False, derivatives=False,
                             bounds=True, bounds_of=(of,))
        if of == "loss":
            self.cond[need], self.run[need] = got["element_cond"], got["element_run"]
        else:
            self.h_cond[need], self.h_run[need] = got["h_cond"], got["h_run"]
        known[need] = True

    def elements_of(self, entries: np.ndarray) -> np.ndarray:
        """The flat elements that flat pred entries belong to."""
        return entries // self.ev.template.classes

    def derivative(self, scale: Fraction, entries: np.ndarray | None = None, floor: bool = False) -> np.ndarray:
        """B_j for the emitted derivative with loss scale ``scale``, at flat pred entries
        (all if None); ``floor``: with cond = run = 0."""
        ev = self.ev
        j = np.arange(ev.h.size) if entries is None else np.asarray(entries, dtype=np.intp)
        if not floor:
            self.fill(None if entries is None else self.elements_of(j))
        with _numbers.context():
            sr = np.abs(ev.factor_numbers.reshape(-1)[j] * _numbers.number(scale))
            g = gamma_mp(self.k_deriv, self.u)
            size = np.maximum(np.abs(ev.h_lo.reshape(-1)[j]), np.abs(ev.h_hi.reshape(-1)[j]))
            under = self.k_deriv * self.eta * np.maximum(1, sr * self.amp)
            if floor:
                return np.asarray(sr * g * size + under, dtype=object)
            run_u = self.u * (1 + g)  # first order, with γ-style headroom: u/(1 - k·u) while k·u < 1
            cond, run = self.h_cond.reshape(-1)[j], self.h_run.reshape(-1)[j]
            return np.asarray(sr * (run_u * run + g * (size + cond)) + under, dtype=object)

    def element(self, ell: Any, cond: Any, run: Any) -> Any:
        """e_i: the forward bound of one element (or of each, given arrays)."""
        k = self.k_loss
        with _numbers.context():
            g = gamma_mp(k, self.u)
            return (self.u * (1 + g) * run + g * (abs(ell) + cond)
                    + max(k, 1) * self.eta * self.amp)


class ForwardSums:
    """The forward bound at the base point and with one element's loss replaced (a
    finite-difference point), from sums over the elements taken once; ``full=False``:
    the floor (every element's cond = run = 0, see :class:`Bounds`).

    Bound on |L̂ - L| (reduced) or on |Σ u_i (F_i - ℓ_i)| ("none"): see the module docstring.
    """

    def __init__(self, bounds: Bounds, full: bool = True):
        ev = self.ev = bounds.ev
        self.bounds, self.full = bounds, full
        if full:
            bounds.fill(of="loss")
        with _numbers.context():
            self.ells = ev.elements.reshape(-1)
            cond, run = (bounds.cond, bounds.run) if full else (0, 0)
            self.errs = np.asarray(bounds.element(self.ells, cond, run), dtype=object).reshape(-1)
            self.none = ev.loss.reduction == "none"
            factors = ev.factor.reshape(-1)
            self.weights = _numbers.from_fractions(factors) if self.none else (factors != 0).astype(int)
            self.n = int(ev.counted.sum())
            self.phi_sum = _numbers.total(self.weights * self.ells)
            self.err_sum = _numbers.total(np.abs(self.weights) * self.errs)
            self.abs_sum = _numbers.total(self.weights * np.abs(self.ells))

    def observed(self, forward: np.ndarray) -> Any:
        """Φ of the implementation's forward values: L, or Σ u_i·F_i for "none"."""
        with _numbers.context():
            if self.none:
                return _numbers.total(self.weights * _numbers.from_floats(forward.reshape(-1)))
            return _numbers.number(float(forward.reshape(-1)[0]))

    def at(self, i: int | None = None, ell: Any = None, cond: Any = None, run: Any = None) -> tuple[Any, Any]:
        """(Φ, bound on the implementation's Φ) at the base point, or with element i's ℓ, cond, run replaced."""
        bounds, ev = self.bounds, self.ev
        with _numbers.context():
            phi, err, absum = self.phi_sum, self.err_sum, self.abs_sum
            if i is not None:
                w = self.weights[i]
                e = bounds.element(ell, cond, run)
                phi = phi + w * (ell - self.ells[i])
                err = err + abs(w) * (e - self.errs[i])
                absum = absum + w * (abs(ell) - abs(self.ells[i]))
            if self.none:
                return phi, err
            r = 1 / _numbers.number(ev.denominator)
            k_d = ev.denominator_ops + 1
            u = bounds.u
            bound = r * (err + gamma_mp(max(self.n - 1, 0), u) * absum) + gamma_mp(k_d, u) * abs(phi * r) \
                + (self.n + k_d) * bounds.eta
            return phi * r, bound


# -------------------------------------------------------------------- the checks
