"""Verify a loss layer's derivative against the exact one, and a family of them at once.

:func:`verify_loss` runs an implementation's derivative (and, if given, its forward)
on NumPy arrays and returns a :class:`symjac.report.Report`. It never crashes on a
misbehaving implementation: raising, wrong shape or dtype, NaN/Inf, changing its
inputs in place and nondeterminism are findings. Bad *inputs* (a label of the
wrong shape, a probability outside [0, 1], ...) are the caller's mistake and raise
:class:`symjac.InputError` / :class:`symjac.SpecError`.

:func:`check_loss_family` checks sibling losses that share one loss scale S (seed
003: four of five nntrainer loss derivatives forgot S) and returns a table.

Error bounds
------------
No tolerance here is guessed. With ``u`` the unit roundoff of the dtype
(2^-11, 2^-24, 2^-53), ``η`` its smallest subnormal and ``γ_k = k·u/(1 - k·u)``:

*Derivative.* The emitted value is ``g_j = S·r_i·h_j`` with ``h_j = dℓ_i/dz_j`` (the
SymPy derivative) and ``r_i`` the exact reduction factor (1/D, 1/B, 1 or the
upstream ``u_i``). The bound has two first-order parts, both computed exactly
(mpmath) from SymPy expressions at the input::

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

*Finite differences* of the implementation's own forward ``F``, at the
representable points ``z± = fl(z_j ± h)`` with ``h`` a power of two near
``u^(1/3)·max(1, |z_j|)`` (the optimum order for central differences), narrowed
to stay inside (0, 1) for bce and kld::

    |g_j - S·(F(z+) - F(z-))/(z+ - z-)| <= B_j + S·(|T_j| + (E+ + E-)/(z+ - z-))

``T_j = (Φ(z+) - Φ(z-))/(z+ - z-) - dΦ/dz_j`` is the truncation error, computed
exactly (mpmath) from the spec's loss ``Φ`` (``L``, or ``Σ u_i ℓ_i`` for
``"none"``); ``E±`` are the forward bounds above at ``z±`` (the forward is checked
against them there too); ``B_j`` is the derivative bound. The exact ``T_j`` is
valid when the forward computes the spec's loss, which the forward check
confirms; where it does not, the FD verdict still compares the backward with
the forward's own difference quotients at the same tolerance (and says so).
Stencils that straddle a kink are skipped, and so is pred = 1 for kld (no
centred stencil fits); both are counted in the stats.

Errors are reported in ULPs of the dtype at ``max(|expected|, |observed|)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._errors import InputError, SpecError
from symjac.loss._evaluate import LossEvaluation, _index, complete_inputs, evaluate
from symjac.loss._spec import Loss, check_loss
from symjac.check._report import Finding, Report, jsonable

FLOAT_DTYPES = ("float16", "float32", "float64")
MAX_FD_PROBES = 32  # FD costs 2 forward calls per probed element; larger preds are sampled evenly

#: Verdict precedence in a family table: the most specific finding names the row.
VERDICT_ORDER = (
    "bad_output",
    "mutates_inputs",
    "missing_scale",
    "wrong_scale",
    "wrong_values",
    "nondeterministic",
    "forward_values",
    "not_fd_consistent",
)


def _dtype(dtype: Any) -> np.dtype[Any]:
    try:
        dt: np.dtype[Any] | None = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in FLOAT_DTYPES:
        raise InputError(f"dtype={dtype!r} is not valid: give one of {', '.join(map(repr, FLOAT_DTYPES))}")
    return dt


def _unit_roundoff(dt: np.dtype[Any]) -> mpmath.mpf:
    return mpmath.ldexp(1, -int(np.finfo(dt).nmant) - 1)


def _frac(x: Any) -> Fraction:
    return Fraction(float(x))


def _mpf(f: Fraction) -> mpmath.mpf:
    return mpmath.mpf(f.numerator) / f.denominator


def _ulp(dt: np.dtype[Any], magnitude: mpmath.mpf) -> mpmath.mpf:
    with np.errstate(over="ignore"):
        v = dt.type(float(abs(magnitude)))
    if not np.isfinite(v):
        v = np.finfo(dt).max
    return mpmath.mpf(float(np.spacing(v)))


def _sha(a: np.ndarray | None) -> str | None:
    return None if a is None else hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _first_diff(a: np.ndarray, b: np.ndarray) -> int:
    fa, fb = a.reshape(-1), b.reshape(-1)
    eq = fa == fb
    if fa.dtype.kind == "f":
        eq |= np.isnan(fa) & np.isnan(fb)
    return int(np.flatnonzero(~eq)[0])


def _gamma(k: int, u: mpmath.mpf) -> mpmath.mpf:
    ku = k * u
    return ku / (1 - ku) if ku < 1 else mpmath.inf


def _show(values: Any, limit: int = 4) -> str:
    """Compact text: -4.0, [-4.0, 4.0]; floats and mpf alike."""
    if values is None:
        return "—"
    arr = np.asarray(values, dtype=object).reshape(-1)
    items = []
    for v in arr[:limit]:
        s = f"{float(v):.6g}"
        if s.lstrip("-").isdigit():
            s += ".0"
        items.append(s)
    more = ", …" if arr.size > limit else ""
    body = ", ".join(items) + more
    return body if arr.size == 1 and np.asarray(values, dtype=object).ndim == 0 else f"[{body}]"


# ------------------------------------------------------------------------ bounds


@dataclasses.dataclass(frozen=True, eq=False)
class _Bounds:
    """Per-dtype bound machinery for one evaluation."""

    ev: LossEvaluation
    dt: np.dtype[Any]
    u: mpmath.mpf
    eta: mpmath.mpf
    k_loss: int
    k_deriv: int
    amp: mpmath.mpf

    @classmethod
    def of(cls, ev: LossEvaluation, dt: np.dtype[Any]) -> _Bounds:
        u = _unit_roundoff(dt)
        p = int(np.finfo(dt).nmant) + 1
        den = ev.denominator
        representable = den.denominator == 1 and den.numerator <= 2**p
        k_r = 2 + ev.denominator_ops + (0 if representable else 1)
        tpl = ev.template
        amp = mpmath.mpf(1)
        for a in ev.args.reshape(-1):
            for v in a[len(tpl.pred) + len(tpl.label):]:
                amp = max(amp, abs(v))
        if ev.loss.kind == "smooth_l1":
            assert ev.loss.delta is not None
            amp = max(amp, 1 / _mpf(ev.loss.delta))
        return cls(
            ev=ev,
            dt=dt,
            u=u,
            eta=mpmath.mpf(float(np.finfo(dt).smallest_subnormal)),
            k_loss=tpl.loss_depth,
            k_deriv=tpl.loss_depth + tpl.derivative_depth + k_r,
            amp=amp,
        )

    def derivative(self, scale: Fraction) -> np.ndarray:
        """B_j for the emitted derivative with loss scale ``scale``."""
        ev = self.ev
        assert ev.h_cond is not None and ev.h_run is not None
        factor = ev.expand(ev.factor)
        g = _gamma(self.k_deriv, self.u)
        run_u = self.u / (1 - self.k_deriv * self.u)  # first order, with the usual γ-style headroom
        out = np.empty(ev.h.size, dtype=object)
        for j, (lo, hi, c, run, r) in enumerate(zip(
            ev.h_lo.reshape(-1), ev.h_hi.reshape(-1), ev.h_cond.reshape(-1), ev.h_run.reshape(-1), factor.reshape(-1)
        )):
            sr = abs(_mpf(scale * r))
            out[j] = sr * (run_u * run + g * (max(abs(lo), abs(hi)) + c)) + self.k_deriv * self.eta * max(
                1, sr * self.amp)
        return out.reshape(ev.h.shape)

    def element(self, ell: mpmath.mpf, cond: mpmath.mpf, run: mpmath.mpf) -> mpmath.mpf:
        """e_i: one element's forward bound."""
        k = self.k_loss
        return (self.u / (1 - k * self.u) * run + _gamma(k, self.u) * (abs(ell) + cond)
                + max(k, 1) * self.eta * self.amp)

    def forward(self, ells: list[Any], conds: list[Any], runs: list[Any], factors: list[Fraction]) -> mpmath.mpf:
        """Bound on |L̂ - L| (reduced) or on |Σ u_i (F_i - ℓ_i)| ("none") at one point."""
        ev = self.ev
        if ev.loss.reduction == "none":
            return mpmath.fsum(abs(_mpf(r)) * self.element(e, c, q) for e, c, q, r in zip(ells, conds, runs, factors))
        r = 1 / _mpf(ev.denominator)
        n = int(ev.counted.sum())
        total = mpmath.fsum(e for e, f in zip(ells, factors) if f != 0)
        per = mpmath.fsum(self.element(e, c, q) for e, c, q, f in zip(ells, conds, runs, factors) if f != 0)
        summ = _gamma(max(n - 1, 0), self.u) * mpmath.fsum(abs(e) for e, f in zip(ells, factors) if f != 0)
        k_d = ev.denominator_ops + 1
        return r * (per + summ) + _gamma(k_d, self.u) * abs(total * r) + (n + k_d) * self.eta


# -------------------------------------------------------------------- the checks


@dataclasses.dataclass
class _Call:
    out: np.ndarray | None
    error: str | None


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> _Call:
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - a misbehaving implementation is a finding, not a crash
        return _Call(None, f"{type(exc).__name__}: {exc}")
    try:
        out = np.array(result, copy=True)
    except Exception as exc:  # noqa: BLE001 - whatever it returned, report it
        return _Call(None, f"returned {type(result).__name__}, not an array: {type(exc).__name__}: {exc}")
    if out.dtype == object or out.dtype.kind not in "fiu":
        return _Call(None, f"returned an array of dtype {out.dtype}; expected real floats")
    return _Call(out, None)


def _nice_scale(c: mpmath.mpf) -> Fraction:
    return Fraction(float(c)).limit_denominator(4096)


def _scale_hint(c: Fraction, s: Fraction, den: Fraction, n: int, reduction: str) -> str:
    hints = {
        s * s: "S², the scale applied twice",
        1 / s: "1/S, divided by S instead of multiplied",
        -s: "-S, the sign flipped",
        -1: "-1: unscaled and the sign flipped",
    }
    if den != 1:
        hints.setdefault(s * den, "S·D: the reduction's division by D is missing")
        hints.setdefault(s / den, "S/D: divided by D twice")
        hints.setdefault(den, "D: the reduction's division by D is missing and the scale too")
    if reduction == "sum" and n > 1:
        hints.setdefault(s / n, f"S/n: averaged over the n = {n} elements where the spec sums")
    hint = hints.get(c)
    return f" ({hint})" if hint else ""


@dataclasses.dataclass(frozen=True, eq=False)
class _Outcome:
    report: Report
    observed: np.ndarray | None
    expected: np.ndarray
    base: np.ndarray


def verify_loss(
    loss: Loss,
    *,
    derivative: Callable[..., Any],
    forward: Callable[..., Any] | None = None,
    pred: Any = None,
    label: Any = None,
    upstream: Any = None,
    dtype: Any = "float32",
) -> Report:
    """Check a loss derivative against the exact ``S·dL/dpred``; every fault a finding.

    The implementation is called on NumPy arrays of ``dtype``:
    ``derivative(pred, label)`` -> ``S·dL/dpred`` (pred's shape and dtype); for
    ``reduction="none"``, ``derivative(pred, label, upstream)`` -> the VJP
    ``S·Σ_i u_i·dℓ_i/dpred``. ``forward(pred, label)`` -> ``L`` (one number; one per
    element for ``"none"``), unscaled.

    Checks, each a :class:`symjac.report.Finding` category:

    - ``bad_output``: raises, wrong shape, wrong dtype, NaN/Inf (derivative or forward).
    - ``mutates_inputs``: pred, label or upstream changed by a call (compared with
      copies taken before, sha256 checksums in the message); a second call on the
      same buffers that then returns wrong values adds ``wrong_values``.
    - ``nondeterministic``: two calls on equal fresh inputs differ bitwise.
    - ``missing_scale``: the derivative equals the unscaled ``dL/dpred`` ("missing
      loss scale"); ``wrong_scale``: it equals ``c·dL/dpred`` for another ``c``
      (named); ``wrong_values``: neither, outside the derived bound.
    - ``forward_values``: the forward disagrees with the exact ``L``.
    - ``not_fd_consistent``: the derivative is not S times the central differences
      of the implementation's own forward (not reported again when a scale
      finding already explains it).

    Bounds are derived in the module docstring, reported in ULPs of ``dtype``.

    Args:
      loss: the spec (its ``scale`` is S).
      derivative: the implementation's derivative callable.
      forward: the implementation's forward callable, optional (enables the
        forward and FD checks).
      pred, label, upstream: inputs; default :func:`symjac.losses.default_inputs`.
        They are rounded to ``dtype`` first and the exact analysis uses the rounded
        values. ``upstream`` only for ``reduction="none"``.
      dtype: ``"float16"``, ``"float32"`` or ``"float64"``.

    Returns:
      The :class:`symjac.report.Report`; ``report.ok`` when there is no finding.

    Raises:
      SpecError: ``loss`` is not a valid spec for these inputs.
      InputError: bad inputs (shape, domain, class index, dtype, ...), named.

    Example::

        >>> import numpy as np, symjac
        >>> unscaled = lambda z, y: (1 / (1 + np.exp(-z)) - y).astype(z.dtype)
        >>> r = symjac.verify_loss(symjac.Loss("sigmoid_ce", scale=8), derivative=unscaled,
        ...                        pred=[0.0], label=[1.0])
        >>> r.categories()
        ['missing_scale']
    """
    return _verify(loss, derivative, forward, pred, label, upstream, dtype).report


def _prepare(
    loss: Loss, pred: Any, label: Any, upstream: Any, dt: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, bool]:
    pred, label, upstream = complete_inputs(loss, pred, label, upstream)
    if upstream is not None and loss.reduction != "none":
        raise InputError(
            f"upstream is given but reduction={loss.reduction!r}: the derivative of a reduced loss takes no "
            "upstream gradient (use reduction='none' for a VJP)"
        )
    rounded = False

    def cast(name: str, a: Any) -> np.ndarray:
        nonlocal rounded
        src = np.asarray(a)
        if src.dtype.kind not in "fiub" and src.dtype != object:
            raise InputError(f"{name} has dtype {src.dtype}; give real numbers")
        try:
            out = src.astype(dt)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} could not be converted to {dt.name}: {exc}") from None
        with np.errstate(invalid="ignore"):
            if src.dtype.kind == "f" and not np.array_equal(out.astype(np.float64), src.astype(np.float64),
                                                           equal_nan=True):
                rounded = True
        return out

    p = cast("pred", pred)
    lab: np.ndarray | None
    if label is None:
        lab = None
    elif loss.kind == "softmax_ce" and loss.labels == "indices":
        raw = np.asarray(label)
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
                bad = int(np.flatnonzero(~(np.isfinite(raw) & (raw == np.round(raw))).reshape(-1))[0])
                raise InputError(
                    f"label{_index(raw.shape, bad)} = {raw.reshape(-1)[bad]!r} is not an integer class index"
                )
        elif raw.dtype.kind not in "iu":
            raise InputError(f"label has dtype {raw.dtype}; labels='indices' takes integer class indices")
        lab = raw.astype(np.int64)
    else:
        lab = cast("label", label)
    up = None if upstream is None else cast("upstream", upstream)
    return p, lab, up, rounded


def _verify(
    loss: Loss,
    derivative: Callable[..., Any],
    forward: Callable[..., Any] | None,
    pred: Any,
    label: Any,
    upstream: Any,
    dtype: Any,
) -> _Outcome:
    check_loss(loss)
    if not callable(derivative):
        raise InputError(f"derivative={derivative!r} is not callable")
    if forward is not None and not callable(forward):
        raise InputError(f"forward={forward!r} is not callable")
    dt = _dtype(dtype)
    p0, l0, u0, rounded = _prepare(loss, pred, label, upstream, dt)
    ev = evaluate(loss, p0, l0, u0, values=True, derivatives=True, bounds=True)
    s = loss.scale
    findings: list[Finding] = []
    stats: dict[str, Any] = {
        "kind": loss.kind,
        "reduction": loss.reduction,
        "scale": s,
        "dtype": dt.name,
        "unit_roundoff": f"2^-{int(np.finfo(dt).nmant) + 1}",
        "elements": int(p0.size),
        "inputs_rounded": rounded,
        "dps": ev.dps,
    }
    bounds = _Bounds.of(ev, dt)

    with mpmath.workdps(ev.dps):
        expected = ev.derivative()
        base = ev.derivative(Fraction(1))
        lo, hi = ev.derivative_set()
        blo, bhi = ev.derivative_set(Fraction(1))
        bnd = bounds.derivative(s)
        fmax = mpmath.mpf(float(np.finfo(dt).max))
        big = [j for j, v in enumerate(expected.reshape(-1)) if abs(v) > fmax]
        if big:
            j = big[0]
            raise InputError(
                f"the exact derivative at pred{_index(p0.shape, j)} is {mpmath.nstr(expected.reshape(-1)[j], 8)}, "
                f"beyond the range of {dt.name}: no {dt.name} implementation can return it; lower the scale or "
                "use a wider dtype"
            )

        args_of = _ArgFactory(loss, p0, l0, u0)
        d_call = _call(derivative, args_of.fresh())
        # ---- first call, on buffers we keep to check for mutation and to call again
        bufs = args_of.fresh()
        first = _call(derivative, bufs)
        after_first = tuple(None if b is None else b.copy() for b in bufs)
        out1 = _check_output(first, "derivative", p0.shape, dt, findings)
        mutated = _mutations(args_of, args_of.originals(), after_first, "derivative", findings)
        second = _call(derivative, bufs)
        out2 = _check_output(second, "derivative", p0.shape, dt, None)
        _mutations(args_of, after_first, tuple(None if b is None else b.copy() for b in bufs), "derivative",
                   findings, again=True)
        if out1 is not None and out2 is not None:
            if mutated and not _same(out1, out2):
                bad2 = _outside(out2, lo, hi, bnd, dt)
                if bad2:
                    j, err_ulp, bound_ulp = bad2[0]
                    findings.append(Finding(
                        "wrong_values",
                        f"called again on the same buffers, {len(bad2)} of {out2.size} derivative values are wrong "
                        f"(it read back the {' and '.join(mutated)} the first call overwrote); worst at "
                        f"pred{_index(p0.shape, j)}: error {err_ulp:.3g} ulp > bound {bound_ulp:.3g} ulp",
                        cells=(tuple(_index(p0.shape, j)),),
                        expected=expected.reshape(-1)[j],
                        observed=float(out2.reshape(-1)[j]),
                    ))
            elif not mutated and not _same(out1, out2):
                _nondeterministic(out1, out2, p0.shape, findings)
        # ---- nondeterminism on equal fresh inputs
        out3 = _check_output(d_call, "derivative", p0.shape, dt, None)
        if out1 is not None and out3 is not None and not _same(out1, out3) and not any(
            f.category == "nondeterministic" for f in findings
        ):
            _nondeterministic(out3, out1, p0.shape, findings)

        # ---- values against the exact derivative
        scale_found: Fraction | None = None
        if out1 is not None:
            bad = _outside(out1, lo, hi, bnd, dt)
            errs = _errors_ulp(out1, lo, hi, bnd, dt)
            stats["max_error_ulps"] = max(e for e, _ in errs)
            stats["bound_ulps_at_worst"] = max(errs, key=lambda eb: eb[0])[1]
            if bad:
                scale_found = _classify(out1, expected, base, blo, bhi, bnd, s, ev, dt, p0.shape, bad, findings)
            stats["values_within_bound"] = not bad

        # ---- forward and FD on the implementation's own forward
        if forward is not None:
            _check_forward(forward, ev, bounds, args_of, out1, bnd, s, scale_found, dt, stats, findings)

    stats["checksums"] = {
        name: _sha(a) for name, a in zip(("pred", "label", "upstream"), args_of.originals()) if a is not None
    }
    subject = f"{loss!r} in {dt.name}"
    if findings:
        cats = list(dict.fromkeys(f.category for f in findings))
        headline = f"{loss.kind}: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    else:
        headline = (
            f"{loss.kind}: {p0.size} derivative values within the derived bound "
            f"(worst {float(stats.get('max_error_ulps', 0)):.3g} ulp, bound there "
            f"{float(stats.get('bound_ulps_at_worst', 0)):.3g} ulp)"
        )
        if forward is not None:
            headline += f"; forward within bound; FD-consistent at {stats.get('fd_checked', 0)} points"
    return _Outcome(Report(subject, tuple(findings), stats, headline), out1, expected, base)


class _ArgFactory:
    """Fresh copies of the call arguments, in the order the callables take them."""

    def __init__(self, loss: Loss, pred: np.ndarray, label: np.ndarray | None, upstream: np.ndarray | None):
        self.pred, self.label, self.upstream = pred, label, upstream
        self.with_upstream = loss.reduction == "none"
        self.names = ("pred", "label", "upstream") if self.with_upstream else ("pred", "label")

    def originals(self) -> tuple[np.ndarray | None, ...]:
        return (self.pred, self.label, self.upstream) if self.with_upstream else (self.pred, self.label)

    def fresh(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        p = (self.pred if pred is None else pred).copy()
        lab = None if self.label is None else self.label.copy()
        if self.with_upstream:
            assert self.upstream is not None
            return (p, lab, self.upstream.copy())
        return (p, lab)

    def forward_args(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        return self.fresh(pred)[:2]


def _check_output(
    call: _Call, who: str, shape: tuple[int, ...], dt: np.dtype[Any], findings: list[Finding] | None
) -> np.ndarray | None:
    problem = None
    out = call.out
    if call.error is not None:
        problem = f"{who} raised or returned no array: {call.error}"
        out = None
    elif out is not None and out.shape != shape:
        problem = f"{who} returned shape {out.shape}; expected {shape} (the shape of pred)"
        out = None
    elif out is not None and out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        j = int(np.flatnonzero(~np.isfinite(out).reshape(-1))[0])
        problem = (f"{who} returned {int((~np.isfinite(out)).sum())} non-finite value(s); first at "
                   f"pred{_index(shape, j)}: {out.reshape(-1)[j]}")
        out = None
    elif out is not None and out.dtype != dt:
        problem = f"{who} returned dtype {out.dtype}; expected {dt.name} (the dtype of pred)"
    if problem and findings is not None:
        findings.append(Finding("bad_output", problem))
    return out


def _mutations(
    args: _ArgFactory,
    before: tuple[np.ndarray | None, ...],
    after: tuple[np.ndarray | None, ...],
    who: str,
    findings: list[Finding],
    again: bool = False,
) -> list[str]:
    changed = []
    for name, b, a in zip(args.names, before, after):
        if b is None or a is None or _same(b, a):
            continue
        changed.append(name)
        if again and any(f.category == "mutates_inputs" and f"changed {name} " in f.message for f in findings):
            continue
        j = _first_diff(b, a)
        where = _index(b.shape, j)
        findings.append(Finding(
            "mutates_inputs",
            f"{who} changed {name} in place{' on a second call' if again else ''} (sha256 {_sha(b)[:12]} -> "  # type: ignore[index]
            f"{_sha(a)[:12]}); first change at {name}{where}: {b.reshape(-1)[j].item()!r} -> {a.reshape(-1)[j].item()!r}, "  # type: ignore[index]
            f"{int((b != a).sum())} element(s) changed. The caller's {name} is corrupted for every later use.",
            cells=(tuple(where),),
            expected=b.reshape(-1)[j].item(),
            observed=a.reshape(-1)[j].item(),
        ))
    return changed


def _nondeterministic(a: np.ndarray, b: np.ndarray, shape: tuple[int, ...], findings: list[Finding]) -> None:
    j = _first_diff(a, b)
    findings.append(Finding(
        "nondeterministic",
        f"two calls on equal inputs returned different derivatives ({int((a != b).sum())} element(s) differ; "
        f"first at pred{_index(shape, j)}: {a.reshape(-1)[j]!r} vs {b.reshape(-1)[j]!r})",
        cells=(tuple(_index(shape, j)),),
        expected=float(a.reshape(-1)[j]),
        observed=float(b.reshape(-1)[j]),
    ))


def _dist(o: mpmath.mpf, lo: mpmath.mpf, hi: mpmath.mpf) -> mpmath.mpf:
    return lo - o if o < lo else (o - hi if o > hi else mpmath.mpf(0))


def _errors_ulp(
    out: np.ndarray, lo: np.ndarray, hi: np.ndarray, bnd: np.ndarray, dt: np.dtype[Any]
) -> list[tuple[float, float]]:
    res = []
    for o, a, b, e in zip(out.reshape(-1), lo.reshape(-1), hi.reshape(-1), bnd.reshape(-1)):
        om = mpmath.mpf(float(o))
        ulp = _ulp(dt, max(abs(om), abs(a), abs(b)))
        res.append((float(_dist(om, a, b) / ulp), float(e / ulp)))
    return res


def _outside(
    out: np.ndarray, lo: np.ndarray, hi: np.ndarray, bnd: np.ndarray, dt: np.dtype[Any]
) -> list[tuple[int, float, float]]:
    """Elements outside [lo - B, hi + B]: (flat index, error ulp, bound ulp), worst first."""
    bad = []
    for j, (o, a, b, e) in enumerate(zip(out.reshape(-1), lo.reshape(-1), hi.reshape(-1), bnd.reshape(-1))):
        om = mpmath.mpf(float(o))
        d = _dist(om, a, b)
        if d > e:
            ulp = _ulp(dt, max(abs(om), abs(a), abs(b)))
            bad.append((j, float(d / ulp), float(e / ulp)))
    bad.sort(key=lambda t: -t[1])
    return bad


def _fits(
    out: np.ndarray, blo: np.ndarray, bhi: np.ndarray, bnd: np.ndarray, c: mpmath.mpf, s: Fraction
) -> bool:
    ratio = max(mpmath.mpf(1), abs(c) / _mpf(s))
    for o, a, b, e in zip(out.reshape(-1), blo.reshape(-1), bhi.reshape(-1), bnd.reshape(-1)):
        lo, hi = sorted((c * a, c * b))
        if _dist(mpmath.mpf(float(o)), lo, hi) > e * ratio:
            return False
    return True


def _classify(
    out: np.ndarray,
    expected: np.ndarray,
    base: np.ndarray,
    blo: np.ndarray,
    bhi: np.ndarray,
    bnd: np.ndarray,
    s: Fraction,
    ev: LossEvaluation,
    dt: np.dtype[Any],
    shape: tuple[int, ...],
    bad: list[tuple[int, float, float]],
    findings: list[Finding],
) -> Fraction | None:
    """missing_scale, wrong_scale (c named) or wrong_values; returns the c found."""
    j, err_ulp, bound_ulp = bad[0]
    where = _index(shape, j)
    worst = (
        f"worst at pred{where}: expected {mpmath.nstr(expected.reshape(-1)[j], 10)}, observed "
        f"{float(out.reshape(-1)[j])!r}, error {err_ulp:.3g} ulp > bound {bound_ulp:.3g} ulp"
    )
    obs = [mpmath.mpf(float(o)) for o in out.reshape(-1)]
    cells = tuple(tuple(_index(shape, b[0])) for b in bad)

    def report(category: str, message: str) -> None:
        findings.append(Finding(category, message, cells=cells, expected=expected, observed=out))

    if s != 1 and _fits(out, blo, bhi, bnd, mpmath.mpf(1), s):
        report("missing_scale", f"missing loss scale: the derivative equals the unscaled dL/dpred; expected "
                                f"S·dL/dpred with S = {s} ({len(bad)} of {out.size} values off; {worst})")
        return Fraction(1)
    smooth = [(o, b) for o, b, lo_, hi_ in zip(obs, base.reshape(-1), blo.reshape(-1), bhi.reshape(-1))
              if lo_ == hi_ and b != 0]
    if smooth:
        c = mpmath.fsum(o * b for o, b in smooth) / mpmath.fsum(b * b for _, b in smooth)
        if c != 0:
            nice = _nice_scale(c)
            for cand, shown in ((_mpf(nice), nice), (c, None)):
                if cand != _mpf(s) and _fits(out, blo, bhi, bnd, cand, s):
                    name = str(shown) if shown is not None else mpmath.nstr(c, 10)
                    hint = (_scale_hint(shown, s, ev.denominator, int(ev.counted.sum()), ev.loss.reduction)
                            if shown is not None else "")
                    report("wrong_scale", f"wrong loss scale: the derivative equals c·dL/dpred with c = {name}{hint}; "
                                          f"expected S·dL/dpred with S = {s} ({worst})")
                    return shown if shown is not None else Fraction(float(c))
    zeros = " (all zeros)" if not np.any(out) else ""
    report("wrong_values", f"{len(bad)} of {out.size} derivative values are outside the derived bound{zeros}; "
                           f"no single factor c makes them c·dL/dpred; {worst}")
    return None


def _forward_value(call: _Call, ev: LossEvaluation, who: str) -> tuple[np.ndarray | None, str | None]:
    if call.error is not None:
        return None, f"{who} raised or returned no array: {call.error}"
    out = call.out
    assert out is not None
    if ev.loss.reduction == "none":
        if out.shape != ev.element_shape:
            return None, f"{who} returned shape {out.shape}; reduction='none' expects {ev.element_shape}"
    elif out.size != 1:
        return None, f"{who} returned shape {out.shape}; reduction={ev.loss.reduction!r} expects one number"
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        return None, f"{who} returned non-finite value(s): {out.reshape(-1)[:4]}"
    return out.astype(np.float64), None


def _phi_obs(out: np.ndarray, ev: LossEvaluation) -> mpmath.mpf:
    if ev.loss.reduction == "none":
        return mpmath.fsum(_mpf(r) * mpmath.mpf(float(v)) for v, r in zip(out.reshape(-1), ev.factor.reshape(-1)))
    return mpmath.mpf(float(out.reshape(-1)[0]))


def _fd_step(loss: Loss, z: float, dt: np.dtype[Any], u: mpmath.mpf) -> float | None:
    h = 2.0 ** round(float(mpmath.log(mpmath.cbrt(u) * max(1, abs(z)), 2)))
    if loss.kind == "bce":
        room = min(z, 1 - z) / 2
        h = min(h, 2.0 ** np.floor(np.log2(room)))
    elif loss.kind == "kld" and not loss.log_input:
        if z >= 1:
            return None
        room = min(z / 2, 1 - z)
        h = min(h, 2.0 ** np.floor(np.log2(room)))
    return h


def _check_forward(
    forward: Callable[..., Any],
    ev: LossEvaluation,
    bounds: _Bounds,
    args_of: _ArgFactory,
    out1: np.ndarray | None,
    bnd: np.ndarray,
    s: Fraction,
    scale_found: Fraction | None,
    dt: np.dtype[Any],
    stats: dict[str, Any],
    findings: list[Finding],
) -> None:
    fargs = args_of.forward_args()
    f0_out, problem = _forward_value(_call(forward, fargs), ev, "forward")
    _mutations(args_of, args_of.originals()[:2], fargs, "forward", findings)
    if problem:
        findings.append(Finding("bad_output", problem))
        stats["fd"] = "skipped: the forward gave no usable value"
        return
    assert f0_out is not None
    assert ev.element_cond is not None and ev.element_run is not None
    ells = list(ev.elements.reshape(-1))
    conds = list(ev.element_cond.reshape(-1))
    runs = list(ev.element_run.reshape(-1))
    factors = list(ev.factor.reshape(-1))
    # -- forward values at the base point
    forward_ok = True
    if ev.loss.reduction == "none":
        for i, (v, e, c, q) in enumerate(zip(f0_out.reshape(-1), ells, conds, runs)):
            b = bounds.element(e, c, q)
            if abs(mpmath.mpf(float(v)) - e) > b:
                ulp = _ulp(dt, abs(e))
                findings.append(Finding(
                    "forward_values",
                    f"forward element {_index(ev.element_shape, i)} = {float(v)!r}; exact "
                    f"{mpmath.nstr(e, 10)}, error {float(abs(mpmath.mpf(float(v)) - e) / ulp):.3g} ulp > bound "
                    f"{float(b / ulp):.3g} ulp",
                    window=tuple(_index(ev.element_shape, i)),
                    expected=e,
                    observed=float(v),
                ))
                forward_ok = False
                break
    else:
        exact = ev.value()
        b = bounds.forward(ells, conds, runs, factors)
        v = mpmath.mpf(float(f0_out.reshape(-1)[0]))
        if abs(v - exact) > b:
            ulp = _ulp(dt, abs(exact))
            findings.append(Finding(
                "forward_values",
                f"forward returned {float(v)!r}; exact L = {mpmath.nstr(exact, 10)}, error "
                f"{float(abs(v - exact) / ulp):.3g} ulp > bound {float(b / ulp):.3g} ulp",
                expected=exact,
                observed=float(v),
            ))
            forward_ok = False
    # -- central differences of the implementation's own forward
    if out1 is None:
        stats["fd"] = "skipped: the derivative gave no usable value"
        return
    tpl = ev.template
    pred = args_of.pred
    n = pred.size
    probes = sorted(set(np.linspace(0, n - 1, min(n, MAX_FD_PROBES)).round().astype(int).tolist()))
    checked = skipped = 0
    worst_ratio = mpmath.mpf(0)
    fd_bad: list[tuple[int, mpmath.mpf, mpmath.mpf, mpmath.mpf]] = []
    stencil_output: str | None = None  # the forward gave no usable value at a stencil point
    stencil_value: str | None = None  # ... or one beyond its bound
    h_flat = ev.h.reshape(-1)
    factor_full = ev.expand(ev.factor).reshape(-1)
    for j in probes:
        where = _index(pred.shape, j)
        i_where = tuple(where[:-1]) if ev.loss.kind == "softmax_ce" else tuple(where)
        slot = where[-1] if ev.loss.kind == "softmax_ce" else 0
        i_flat = int(np.ravel_multi_index(i_where, ev.element_shape)) if ev.element_shape else 0
        if not ev.counted.reshape(-1)[i_flat] or factor_full[j] == 0:
            skipped += 1
            continue
        z = float(pred.reshape(-1)[j])
        h = _fd_step(ev.loss, z, dt, bounds.u)
        if h is None:
            skipped += 1
            continue
        zp, zm = dt.type(z + h), dt.type(z - h)
        step = _frac(zp) - _frac(zm)
        if step <= 0:
            skipped += 1
            continue
        base_args = ev.args.reshape(-1)[i_flat]
        pts = []
        for zz in (zp, zm):
            a = list(base_args)
            a[slot] = _mpf(_frac(zz))
            pts.append(tuple(a))
        if ev.loss.kind == "bce" and not (0 < zm and zp < 1) or (
            ev.loss.kind == "kld" and not ev.loss.log_input and not (0 < zm and zp <= 1)
        ):
            skipped += 1
            continue
        if tpl.kink_fn is not None:
            signs = [[mpmath.sign(k) for k in tpl.kink_fn(*a)] for a in (pts[0], base_args, pts[1])]
            if any(0 in sg for sg in signs) or signs[0] != signs[2]:
                skipped += 1
                continue
        vals = [tpl.loss_cond_fn(*a) for a in pts]
        r = factors[i_flat]
        phi = []
        errs = []
        for ell, cond, run in vals:
            e2, c2, q2 = list(ells), list(conds), list(runs)
            e2[i_flat], c2[i_flat], q2[i_flat] = ell, cond, run
            if ev.loss.reduction == "none":
                phi.append(mpmath.fsum(_mpf(f) * e for f, e in zip(factors, e2)))
            else:
                phi.append(mpmath.fsum(e for e, f in zip(e2, factors) if f != 0) / _mpf(ev.denominator))
            errs.append(bounds.forward(e2, c2, q2, factors))
        dstep = _mpf(step)
        trunc = (phi[0] - phi[1]) / dstep - _mpf(r) * h_flat[j]
        noise = (errs[0] + errs[1]) / dstep
        # forward at the stencil points
        obs: list[mpmath.mpf] = []
        for zz in (zp, zm):
            pz = pred.copy()
            pz.reshape(-1)[j] = zz
            val, prob = _forward_value(_call(forward, args_of.forward_args(pz)), ev, "forward")
            if prob:
                obs = []
                stencil_output = stencil_output or f"at a finite-difference point: {prob}"
                break
            assert val is not None
            obs.append(_phi_obs(val, ev))
        if len(obs) != 2:
            skipped += 1
            continue
        for o, p_, e_, zz in zip(obs, phi, errs, (zp, zm)):
            if forward_ok and abs(o - p_) > e_ and stencil_value is None:
                stencil_value = (f"forward at pred{where} = {float(zz)!r} (a finite-difference point) gives "
                               f"{mpmath.nstr(o, 10)}; exact {mpmath.nstr(p_, 10)}, beyond the bound "
                               f"{mpmath.nstr(e_, 3)}")
        fd = _mpf(s) * (obs[0] - obs[1]) / dstep
        tol = bnd.reshape(-1)[j] + _mpf(s) * (abs(trunc) + noise)
        o1 = mpmath.mpf(float(out1.reshape(-1)[j]))
        checked += 1
        ratio = abs(o1 - fd) / tol if tol > 0 else (mpmath.inf if o1 != fd else mpmath.mpf(0))
        worst_ratio = max(worst_ratio, ratio)
        if abs(o1 - fd) > tol:
            fd_bad.append((j, fd, o1, tol))
    if stencil_output is not None:
        findings.append(Finding("bad_output", stencil_output))
    if stencil_value is not None:
        findings.append(Finding("forward_values", stencil_value))
    stats["fd_checked"] = checked
    stats["fd_skipped"] = skipped
    stats["fd_worst_error_over_tolerance"] = float(worst_ratio)
    stats["fd_consistent"] = not fd_bad
    if fd_bad and scale_found is None:
        j, fd, o1, tol = max(fd_bad, key=lambda t: abs(t[2] - t[1]) / t[3])
        why = "" if forward_ok else " (the forward itself disagrees with the exact loss: see forward_values)"
        findings.append(Finding(
            "not_fd_consistent",
            f"the derivative is not S times the derivative of the implementation's own forward at {len(fd_bad)} of "
            f"{checked} probed elements{why}; worst at pred{_index(pred.shape, j)}: S·(F(z+h) - F(z-h))/2h = "
            f"{mpmath.nstr(fd, 10)}, derivative {float(o1)!r}, tolerance {mpmath.nstr(tol, 3)} (truncation + "
            "forward rounding + derivative bound)",
            cells=tuple(tuple(_index(pred.shape, b[0])) for b in fd_bad),
            expected=fd,
            observed=float(o1),
        ))


# ------------------------------------------------------------------------ family


@dataclasses.dataclass(frozen=True)
class LossImpl:
    """One sibling implementation for :func:`check_loss_family`.

    Attributes:
      loss: a :class:`Loss` or a kind name (its scale is replaced by the family's S).
      derivative: as for :func:`verify_loss`.
      forward: optional, as for :func:`verify_loss`.
      pred, label, upstream: inputs (default :func:`symjac.losses.default_inputs`).
    """

    loss: Loss | str
    derivative: Callable[..., Any]
    forward: Callable[..., Any] | None = None
    pred: Any = None
    label: Any = None
    upstream: Any = None


@dataclasses.dataclass(frozen=True)
class FamilyRow:
    """One row of a :class:`FamilyTable`.

    Attributes:
      name: the implementation's name.
      loss: the spec checked (with the family's scale).
      base: the exact unscaled derivative dL/dpred (mpf object array).
      expected: the exact S·dL/dpred.
      observed: what the implementation returned (None if it returned nothing usable).
      verdict: ``"pass"`` or the leading finding category (:data:`VERDICT_ORDER`).
      report: the full :class:`symjac.report.Report`.
    """

    name: str
    loss: Loss
    base: np.ndarray
    expected: np.ndarray
    observed: np.ndarray | None
    verdict: str
    report: Report

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "loss": repr(self.loss),
            "base": [mpmath.nstr(v, 20) for v in self.base.reshape(-1)],
            "expected": [mpmath.nstr(v, 20) for v in self.expected.reshape(-1)],
            "observed": None if self.observed is None else jsonable(self.observed.reshape(-1)),
            "verdict": self.verdict,
            "categories": self.report.categories(),
        }


@dataclasses.dataclass(frozen=True)
class FamilyTable:
    """Sibling losses under one loss scale: loss, base derivative, expected, observed, verdict."""

    scale: Fraction
    dtype: str
    rows: tuple[FamilyRow, ...]

    @property
    def ok(self) -> bool:
        return all(r.verdict == "pass" for r in self.rows)

    def counts(self) -> dict[str, int]:
        """Rows per verdict, in order of first appearance."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def __str__(self) -> str:
        head = ("loss", "base derivative", f"expected (S = {self.scale})", "observed", "verdict")
        body = [(r.name, _show(r.base), _show(r.expected), _show(r.observed), r.verdict) for r in self.rows]
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(5)]
        lines = [f"loss-scale family check: S = {self.scale}, {self.dtype}"]
        for row in [head, *body]:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items())
        lines.append(f"{len(self.rows)} losses: {counts}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Stable keys: ``ok``, ``scale``, ``dtype``, ``counts``, ``rows``."""
        return {
            "ok": self.ok,
            "scale": str(self.scale),
            "dtype": self.dtype,
            "counts": self.counts(),
            "rows": [r.to_dict() for r in self.rows],
        }


_IMPL_KEYS = {f.name for f in dataclasses.fields(LossImpl)}


def _impl(name: str, value: Any) -> LossImpl:
    if isinstance(value, LossImpl):
        return value
    if isinstance(value, Mapping):
        extra = set(value) - _IMPL_KEYS
        if extra:
            raise SpecError(f"impls[{name!r}] has unknown key(s) {sorted(extra)}; valid keys: {sorted(_IMPL_KEYS)}")
        if "loss" not in value or "derivative" not in value:
            raise SpecError(f"impls[{name!r}] needs 'loss' and 'derivative'")
        return LossImpl(**value)
    raise SpecError(f"impls[{name!r}]={value!r} is not valid: give a symjac.LossImpl or a dict with 'loss' and "
                    "'derivative'")


def check_loss_family(
    impls: Mapping[str, Any], scale: Any = 8, *, dtype: Any = "float32"
) -> FamilyTable:
    """Verify sibling loss implementations that share one loss scale S, as a table.

    Seed 003's point: the loss scale is a contract across a family of code paths,
    so compare siblings, not one function. Each implementation is checked with
    :func:`verify_loss` under the family's S; the table lists, per loss, the exact
    base derivative ``dL/dpred``, the expected ``S·dL/dpred``, what it returned and
    a verdict (``"pass"`` or the leading finding category).

    Args:
      impls: name -> :class:`LossImpl` (or a dict with its fields).
      scale: the shared loss scale S > 0; it replaces each spec's scale.
      dtype: as for :func:`verify_loss`.

    Returns:
      A :class:`FamilyTable` (``str`` renders it; ``to_dict`` for JSON).

    Raises:
      SpecError: an entry is malformed, or ``scale`` is not > 0.
      InputError: an entry's inputs are invalid (the message names the entry).
    """
    if not isinstance(impls, Mapping) or not impls:
        raise SpecError(f"impls={impls!r} is not valid: give a non-empty mapping name -> LossImpl")
    s = Loss("mse", scale=scale).scale  # validates S once, with Loss's message
    rows = []
    for name, value in impls.items():
        impl = _impl(str(name), value)
        try:
            spec = impl.loss if isinstance(impl.loss, Loss) else Loss(impl.loss)
            spec = dataclasses.replace(spec, scale=s)
            outcome = _verify(spec, impl.derivative, impl.forward, impl.pred, impl.label, impl.upstream, dtype)
        except (SpecError, InputError) as exc:
            raise type(exc)(f"impls[{name!r}]: {exc}") from None
        cats = outcome.report.categories()
        verdict = "pass" if not cats else min(cats, key=lambda c: VERDICT_ORDER.index(c)
                                              if c in VERDICT_ORDER else len(VERDICT_ORDER))
        rows.append(FamilyRow(str(name), spec, outcome.base, outcome.expected, outcome.observed, verdict,
                              outcome.report))
    return FamilyTable(s, _dtype(dtype).name, tuple(rows))


__all__ = ["FamilyRow", "FamilyTable", "LossImpl", "check_loss_family", "verify_loss"]
