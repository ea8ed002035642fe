"""The forward against the exact loss, and the derivative against central differences of that forward.

The tolerances are derived in :mod:`symjac.verifiers.loss._verify`'s docstring ("Finite differences").
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.check._rounding import finfo, ulp_mp
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds, ForwardSums
from symjac.loss._domain import index as _index
from symjac.loss._elements import element_values
from symjac.loss._evaluate import LossEvaluation, to_numpy
from symjac.loss._spec import Loss
from symjac.verifiers.loss._inputs import _ArgFactory
from symjac.verifiers.loss._values import _Expected, _show

MAX_FD_PROBES = 32  # FD costs 2 forward calls per probed element; larger preds are sampled evenly

def _frac(x: Any) -> Fraction:
    return Fraction(float(x))



def ulps_text(x: Any) -> str:
    """A ratio to the ulp as messages print it (3 significant digits)."""
    return f"{float(x):.3g}"


def value_detail(shown: str, error_ulps: str, bound_ulps: str) -> str:
    """The exact value, the error and the bound of a forward value beyond its bound."""
    return f"{shown}, error {error_ulps} ulp > bound {bound_ulps} ulp"


def reduced_message(v: float, detail: str) -> str:
    """forward_values' words for a reduced loss's forward ``v`` beyond its bound."""
    return f"forward returned {v!r}; exact L = {detail}"


def scale_candidates(s: Fraction, ratio: Any) -> list[Fraction]:
    """The factors c that :meth:`_ForwardCheck._scaled_hint` tries for a forward ``ratio``
    times the exact loss (finite, nonzero): the loss scale S (if not 1), the ratio's nearest
    power of two (if not 1) and its nearest integer (if at least 2 in size)."""
    candidates: list[Fraction] = [s] if s != 1 else []
    k = int(gmpy2.floor(gmpy2.log2(abs(ratio)) + gmpy2.mpfr(0.5)))
    if k:
        candidates.append(Fraction(2) ** k * (1 if ratio > 0 else -1))
    n = int(gmpy2.rint(ratio))
    if abs(n) >= 2:
        candidates.append(Fraction(n))
    return candidates


def scaled_words(c: Fraction, s: Fraction) -> str:
    """The hint for a forward that equals c times the exact loss (S: the loss scale)."""
    if c == s:
        return f"; your forward equals S·L (S = {s}, the loss scale): the forward must return the unscaled L"
    return f"; your forward equals {c}·L (exactly {c} times the exact loss, within its bound)"


def fd_finding(shape: tuple[int, ...], bad: list[int], checked: int, forward_ok: bool, worst: int, fd: Any,
               observed: float, tol_text: str) -> Finding:
    """not_fd_consistent: ``bad`` the flat pred entries whose probe missed, ``worst`` the
    one that missed most (its central difference ``fd``, derivative, tolerance)."""
    why = "" if forward_ok else " (the forward itself disagrees with the exact loss: see forward_values)"
    return Finding(
        "not_fd_consistent",
        f"the derivative is not S times the derivative of the implementation's own forward at {len(bad)} of "
        f"{checked} probed elements{why}; worst at pred{_index(shape, worst)}: S·(F(z+h) - F(z-h))/2h = "
        f"{_show(fd)}, derivative {observed!r}, tolerance {tol_text} (truncation + forward rounding + derivative "
        "bound)",
        cells=tuple(tuple(_index(shape, j)) for j in bad), expected=_numbers.to_mpf(fd), observed=observed)


def probe_entries(size: int) -> list[int]:
    """The flat pred entries the finite differences probe: up to :data:`MAX_FD_PROBES`, evenly spread."""
    return sorted(set(np.linspace(0, size - 1, min(size, MAX_FD_PROBES)).round().astype(int).tolist()))


def stencil(kind: Any, loss: Loss, z: float, dt: np.dtype[Any], u: Any) -> tuple[Any, Any, Fraction] | None:
    """The centred stencil about ``z``: ``(z+, z-, z+ - z-)`` in ``dt``, its step a power of two near
    ``u^(1/3)·max(1, |z|)`` narrowed by the kind to its domain; None where no stencil fits."""
    h = kind.fd_step(loss, z, 2.0 ** round(math.log2(float(u) ** (1 / 3) * max(1.0, abs(z)))))
    if h is None:
        return None
    zp, zm = dt.type(z + h), dt.type(z - h)
    step = _frac(zp) - _frac(zm)
    if step <= 0 or not kind.stencil_inside(loss, zm, zp):
        return None
    return zp, zm, step


@dataclasses.dataclass
class _Probe:
    """One finite-difference probe at pred element j: S·(F(z+) - F(z-))/(z+ - z-), the
    derivative there, and the tolerance (derivative bound + truncation + forward noise)."""

    j: int
    fd: Any
    observed: Any
    tol: Any
    bad: bool


class _ForwardCheck:
    """The forward against the exact loss, then the derivative against central
    differences of that forward (bounds in the module docstring)."""

    def __init__(self, fwd: Guard, ev: LossEvaluation, bounds: Bounds, args_of: _ArgFactory, dt: np.dtype[Any],
                 stats: dict[str, Any], findings: list[Finding]):
        self.fwd, self.ev, self.bounds, self.args_of, self.dt = fwd, ev, bounds, args_of, dt
        self.stats, self.findings = stats, findings
        self.sums = ForwardSums(bounds, full=False)  # made full where the floor fails (see Bounds)
        self.forward_ok = True
        self.stencil_value: str | None = None  # the forward at a stencil point beyond its bound

    def value(self, pred: np.ndarray | None = None) -> np.ndarray | None:
        """The implementation's forward at pred (default: the base point), float64, or None.

        At the base point, +-inf is right where the exact loss rounds to it in the dtype.
        """
        none = self.ev.loss.reduction == "none"
        out = self.fwd.array(*self.args_of.forward_args(pred), shape=self.ev.element_shape if none else (),
                             dtype=None, index_name="loss",
                             shape_note=" (reduction='none': one loss per element)" if none else "",
                             infinite=self.rounded() if pred is None else None)
        return None if out is None else out.astype(np.float64)

    def rounded(self) -> np.ndarray:
        """The exact loss (per element for "none") correctly rounded to the dtype: inf where it overflows."""
        exact = self.ev.elements.reshape(-1) if self.ev.loss.reduction == "none" else [self.ev.value()]
        return to_numpy(exact, self.dt).astype(np.float64).reshape(self.ev.element_shape
                                                                   if self.ev.loss.reduction == "none" else ())

    def run(self, out1: np.ndarray | None, ex: _Expected, scale_found: Fraction | None) -> None:
        f0 = self.value()
        if f0 is None:
            self.stats["fd"] = "skipped: the forward gave no usable value"
            return
        self.forward_ok = self.check_base(f0)
        if not np.isfinite(f0).all():
            self.stats["fd"] = f"skipped: the exact loss overflows {self.dt.name} (the forward rightly returns inf)"
            return
        if out1 is None:
            self.stats["fd"] = "skipped: the derivative gave no usable value"
            return
        self.finite_differences(out1, ex, scale_found)

    def check_base(self, f0: np.ndarray) -> bool:
        """Forward values at the given inputs: per element ("none"), or the reduced L."""
        ev, dt = self.ev, self.dt
        rounded = self.rounded().reshape(-1)
        got = f0.reshape(-1)
        right_inf = np.isinf(got) & (got == rounded)  # the exact value overflows the dtype: inf is right
        while True:
            with _numbers.context():
                if ev.loss.reduction == "none":
                    exact, bound = self.sums.ells, self.sums.errs
                else:
                    phi, b = self.sums.at()
                    exact, bound = np.array([phi], dtype=object), np.array([b], dtype=object)
                error = np.abs(_numbers.from_floats(np.where(right_inf, 0, got)) - exact)
                wrong = np.flatnonzero(np.asarray(error > bound, dtype=bool) & ~right_inf)
            if not wrong.size:
                return True
            if self.sums.full:
                break
            self.sums = ForwardSums(self.bounds, full=True)
        with _numbers.context():
            i = int(wrong[0])
            e, b, v = exact[i], bound[i], float(got[i])
            ulp = ulp_mp(dt, abs(e))
            detail = value_detail(_show(e), ulps_text(error[i] / ulp), ulps_text(b / ulp))
        if ev.loss.reduction == "none":
            where = tuple(_index(ev.element_shape, i))
            message = f"forward element {list(where)} = {v!r}; exact {detail}"
        else:
            where, message = None, reduced_message(v, detail)
        message += self._scaled_hint(got, exact, bound, right_inf)
        self.findings.append(Finding("forward_values", message, window=where, expected=_numbers.to_mpf(e), observed=v))
        return False

    def _scaled_hint(self, got: np.ndarray, exact: np.ndarray, bound: np.ndarray, right_inf: np.ndarray) -> str:
        """"; your forward equals S·L" when every value is c times the exact one within c times
        its bound and one more rounding (the product), for c the loss scale S, or the ratio's
        nearest power of two or integer (named exactly); "" when none fits."""
        counted = np.flatnonzero(~right_inf & np.asarray(exact != 0, dtype=bool))
        if not counted.size:
            return ""
        s = self.ev.loss.scale
        u = Fraction(1, 2 ** (int(finfo(self.dt).nmant) + 1))
        with _numbers.context():
            obs = _numbers.from_floats(got[counted])
            e, b = exact[counted], bound[counted]
            ratio = obs[0] / e[0]
            if not gmpy2.is_finite(ratio) or ratio == 0:
                return ""
            for c in scale_candidates(s, ratio):
                cm = _numbers.number(c)
                slack = abs(cm) * b + abs(cm * e) * _numbers.number(u)
                if np.all(np.asarray(abs(obs - cm * e) <= slack, dtype=bool)):
                    return scaled_words(c, s)
        return ""

    def finite_differences(self, out1: np.ndarray, ex: _Expected, scale_found: Fraction | None) -> None:
        """Probe up to :data:`MAX_FD_PROBES` elements, evenly spread; report the worst misfit."""
        pred = self.args_of.pred
        n = pred.size
        probes = probe_entries(n)
        stencils = [st for st in self.stencils(probes) if self.observe(st)]
        bound = ex.bound(np.array([st.j for st in stencils], dtype=np.intp))
        checked = self.judge(stencils, out1, bound)
        if (any(p.bad for p in checked) or self.stencil_value is not None) and not self.sums.full:
            self.sums, self.stencil_value = ForwardSums(self.bounds, full=True), None
            checked = self.judge(stencils, out1, bound)
        fd_bad = [p for p in checked if p.bad]
        with _numbers.context():
            worst = max((abs(p.observed - p.fd) / p.tol if p.tol > 0 else
                         (gmpy2.inf() if p.observed != p.fd else 0) for p in checked), default=0)
        if self.stencil_value is not None:
            self.findings.append(Finding("forward_values", self.stencil_value))
        self.stats["fd_checked"] = len(checked)
        self.stats["fd_skipped"] = len(probes) - len(checked)
        self.stats["fd_worst_error_over_tolerance"] = float(worst)
        self.stats["fd_consistent"] = not fd_bad
        if not fd_bad or scale_found is not None:
            return
        with _numbers.context():
            p = max(fd_bad, key=lambda t: abs(t.observed - t.fd) / t.tol)
        self.findings.append(fd_finding(pred.shape, [b.j for b in fd_bad], len(checked), self.forward_ok, p.j,
                                        p.fd, float(p.observed), _show(p.tol, 3)))

    def _point(self, j: int) -> tuple[int, int, float] | None:
        """(element, slot in the template's arguments, z) of pred entry j, or None if it does not count."""
        ev, pred = self.ev, self.args_of.pred
        where = _index(pred.shape, j)
        per_row = ev.kind.class_axis
        i_flat = int(np.ravel_multi_index(tuple(where[:-1]) if per_row else tuple(where), ev.element_shape)) \
            if ev.element_shape else 0
        if not ev.counted.reshape(-1)[i_flat] or ev.expand(ev.factor).reshape(-1)[j] == 0:
            return None
        return i_flat, where[-1] if per_row else 0, float(pred.reshape(-1)[j])

    def stencils(self, probes: list[int]) -> list[_Stencil]:
        """The stencils z± around the probed entries, with the exact loss at both points
        (one batch), where a centred stencil fits: not across a kink, inside the domain,
        on an element that counts."""
        ev, dt = self.ev, self.dt
        kept: list[_Stencil] = []
        for j in probes:
            point = self._point(j)
            around = None if point is None else stencil(ev.kind, ev.loss, point[2], dt, self.bounds.u)
            if point is None or around is None:
                continue
            kept.append(_Stencil(j, point[0], point[1], *around))
        if not kept:
            return []
        cols = [np.array([c[st.i_flat] for st in kept for _ in range(3)], dtype=object) for c in ev.columns]
        for k, st in enumerate(kept):
            cols[st.slot][3 * k], cols[st.slot][3 * k + 2] = _numbers.from_floats(np.array([st.zp, st.zm]))
        if ev.template.kink_args:  # the signs of every kink argument at z+, z, z- must agree and not vanish
            with _numbers.context():
                signs = np.stack([np.asarray(k > 0, dtype=int) - np.asarray(k < 0, dtype=int) for k in
                                  ev.template.kink_values(cols)], axis=1)
            signs = signs.reshape(len(kept), 3, -1)
            smooth = np.all((signs != 0) & (signs == signs[:, :1]), axis=(1, 2))
            kept = [st for st, ok in zip(kept, smooth) if ok]
            cols = [c.reshape(-1, 3)[smooth].reshape(-1) for c in cols]
        kept, got = self._forward_bounds(kept, cols)
        for k, st in enumerate(kept):
            st.exact = [(got["elements"][2 * k + m], got["element_cond"][2 * k + m], got["element_run"][2 * k + m])
                        for m in (0, 1)]
        return kept

    def _forward_bounds(self, kept: list[_Stencil], cols: list[np.ndarray]) -> tuple[list[_Stencil], dict[str, Any]]:
        """The exact loss and its forward bounds at every kept stencil's z± (one batch). A stencil point
        where the bound's condition is singular (a division by 0: triplet_margin's Euclidean norm at 0, a
        non-differentiable point no kink argument names) is no smooth stencil: it is left out, as a kink."""
        def at(chosen: list[np.ndarray]) -> dict[str, Any]:
            return element_values(self.ev.template, [c.reshape(-1, 3)[:, ::2].reshape(-1) for c in chosen],
                                  values=True, derivatives=False, bounds=True, bounds_of=("loss",))
        try:
            return kept, at(cols)
        except ZeroDivisionError:
            pass
        smooth = np.zeros(len(kept), dtype=bool)
        for k in range(len(kept)):
            try:
                at([c.reshape(-1, 3)[k:k + 1].reshape(-1) for c in cols])
                smooth[k] = True
            except ZeroDivisionError:
                continue
        if not smooth.any():
            return [], {}
        cols = [c.reshape(-1, 3)[smooth].reshape(-1) for c in cols]
        return [st for st, ok in zip(kept, smooth) if ok], at(cols)

    def observe(self, st: _Stencil) -> bool:
        """The implementation's Φ at z+ and z- (False if a call gave no usable value)."""
        for zz in (st.zp, st.zm):
            pz = self.args_of.pred.copy()
            pz.reshape(-1)[st.j] = zz
            val = self.value(pz)
            if val is None:
                return False
            st.observed.append(self.sums.observed(val))
        return True

    def judge(self, stencils: list[_Stencil], out1: np.ndarray, bound: np.ndarray) -> list[_Probe]:
        """Each observed stencil's central difference against the derivative, with its
        tolerance (derivative bound + truncation + forward bounds at z±, over the step)."""
        ev = self.ev
        probes = []
        with _numbers.context():
            s = _numbers.number(ev.loss.scale)
            for st, b in zip(stencils, bound):
                (phi_p, err_p), (phi_m, err_m) = (self.sums.at(st.i_flat, *e) for e in st.exact)
                r = _numbers.number(ev.factor.reshape(-1)[st.i_flat])
                dstep = _numbers.number(st.step)
                # Φ(z+) - Φ(z-) = r_i·(ℓ(z+) - ℓ(z-)): formed from the two elements, not the two sums
                trunc = r * (st.exact[0][0] - st.exact[1][0]) / dstep - r * ev.h.reshape(-1)[st.j]
                for o, p_, e_, zz in zip(st.observed, (phi_p, phi_m), (err_p, err_m), (st.zp, st.zm)):
                    if self.forward_ok and abs(o - p_) > e_ and self.stencil_value is None:
                        self.stencil_value = (
                            f"forward at pred{_index(self.args_of.pred.shape, st.j)} = {float(zz)!r} (a "
                            f"finite-difference point) gives {_show(o)}; exact {_show(p_)}, beyond the bound "
                            f"{_show(e_, 3)}")
                tol = b + s * (abs(trunc) + (err_p + err_m) / dstep)
                fd = s * (st.observed[0] - st.observed[1]) / dstep
                observed = _numbers.number(float(out1.reshape(-1)[st.j]))
                probes.append(_Probe(st.j, fd, observed, tol, abs(observed - fd) > tol))
        return probes


@dataclasses.dataclass
class _Stencil:
    """The representable points z± = fl(z ± h) around pred entry j (element i_flat,
    template argument ``slot``), and the exact (ℓ, cond, run) at each."""

    j: int
    i_flat: int
    slot: int
    zp: Any
    zm: Any
    step: Fraction
    exact: list[tuple[Any, Any, Any]] = dataclasses.field(default_factory=list)
    observed: list[Any] = dataclasses.field(default_factory=list)  # the implementation's Φ at z+, z-

