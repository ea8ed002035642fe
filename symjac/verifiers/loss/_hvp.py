"""Verify a loss's Hessian-vector product: ``verify_loss(loss, hvp=...)``.

The implementation's ``hvp(pred, label, v)`` (``hvp(pred, label, v, upstream)`` for
``reduction="none"``) must be ``H·v`` with ``H = S·∂²L/∂pred²`` (the loss scale S
included, ``S·Σ_i u_i·∇²ℓ_i`` for ``"none"``). Each entry is compared with the exact
value (:mod:`symjac.loss._hessian`, 200-bit MPFR)
within the bound derived there from the second derivative's expressions; nothing is
a guessed tolerance. A result that is the exact one times a constant is named: the
unscaled ``H·v`` (``missing_scale``), or ``c·H·v`` (``wrong_scale``, c named, e.g. the
``1/n`` of a mean applied to a sum); anything else is ``wrong_second_derivative`` with
the entries. The call runs twice on fresh copies (determinism), through the guarded
call core: raising, bad output and mutation are findings.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import Guard
from symjac.check._report import MAX_LISTED, Finding, Report
from symjac.check._rounding import precision
from symjac.check._unsupported import cast_floats, unsupported
from symjac.loss._domain import index as _index
from symjac.loss._hessian import HessianEvaluation
from symjac.loss._evaluate import evaluate_checked
from symjac.loss import _numbers
from symjac.loss._spec import Loss
from symjac.verifiers.loss._inputs import prepare_inputs


def default_direction(shape: tuple[int, ...], dtype: np.dtype[Any], seed: int = 0) -> np.ndarray:
    """Distinct quarter-integer magnitudes (as far as the dtype holds integers) with random
    signs: an hvp that mixes up two entries changes the result."""
    rng = np.random.default_rng(seed + 7)
    n = int(np.prod(shape))
    limit = 2 ** precision(dtype)
    values = (rng.permutation(n) % limit + 1) * rng.choice([-1, 1], size=n) / 4
    return np.asarray(values.reshape(shape), dtype=dtype)


def _within(obs: np.ndarray, want: np.ndarray, bound: np.ndarray, c: Any = 1) -> np.ndarray:
    """Per entry: |obs - c·want| <= |c|·bound (MPFR arrays; c a Fraction)."""
    with _numbers.context():
        cc = _numbers.number(Fraction(c))
        return np.asarray(np.abs(_numbers.from_floats(obs.reshape(-1)) - cc * want.reshape(-1))
                          <= abs(cc) * bound.reshape(-1), dtype=bool)


def _ratio(obs: np.ndarray, want: np.ndarray) -> Fraction | None:
    """The constant c with obs ≈ c·want (least squares, as a short fraction), or None."""
    w = np.array([float(x) for x in want.reshape(-1)], dtype=np.float64)
    o = obs.reshape(-1).astype(np.float64)
    den = float(w @ w)
    if den == 0:
        return None
    return Fraction(float(o @ w) / den).limit_denominator(1024)


def check_hvp(loss: Loss, hvp: Callable[..., Any], pred: Any, label: Any, upstream: Any, v: Any,
              dt: np.dtype[Any], timeout: float | None) -> Report:
    """The hvp check at one input (see the module docstring)."""
    if not callable(hvp):
        raise InputError(f"hvp={hvp!r} is not callable")
    p0, l0, u0, _ = prepare_inputs(loss, pred, label, upstream, dt)
    if v is None:
        v0 = default_direction(p0.shape, dt)
    else:
        raw = np.asarray(v)
        if raw.shape != p0.shape:
            raise InputError(f"v has shape {raw.shape}; pred's shape is {p0.shape}")
        v0 = raw.astype(dt)
        if not np.array_equal(v0.astype(np.float64), raw.astype(np.float64)):
            raise InputError(f"v is not exactly representable in {dt}; give values that are (small dyadic numbers)")
    # elements on a kink (the margin losses' defaults reach them on purpose) have no second
    # derivative: their entries are not compared, and the stats say how many
    ev = evaluate_checked(loss, p0, l0, u0, values=False, derivatives=False)
    h = HessianEvaluation(ev, skip_kinks=True)
    at_kink = ev.expand(h.skipped.reshape(ev.element_shape)).reshape(-1)
    want = h.hvp_numbers(v0.astype(np.float64)).reshape(p0.shape)
    bound = h.bound_numbers(v0.astype(np.float64), dt)
    findings: list[Finding] = []
    none = loss.reduction == "none"
    names = ("pred", "label", "v", "upstream") if none else ("pred", "label", "v")
    guard = Guard(hvp, "hvp", names, findings, timeout=timeout)

    def args() -> tuple[Any, ...]:
        base = (p0.copy(), None if l0 is None else l0.copy(), v0.copy())
        return base + ((u0.copy() if u0 is not None else None),) if none else base

    out = guard.array(*args(), shape=p0.shape, dtype=dt, index_name="H·v")
    again = guard.array(*args(), shape=p0.shape, dtype=dt, index_name="H·v")
    if out is not None and again is not None:
        guard.compare(out, again, "H·v")
    stats: dict[str, Any] = {"entries": int(p0.size), "hvp_calls": guard.calls, "dtype": dt.name,
                             "entries_at_kinks": int(at_kink.sum())}
    if out is not None:
        _values(loss, out.astype(np.float64), want, bound, p0.shape, findings, stats, ~at_kink)
    ok = not findings
    if ok:
        skipped = f" ({int(at_kink.sum())} at a kink, where none exists, not compared)" if at_kink.any() else ""
        headline = (f"{loss.kind}: hvp matches the exact S·∂²L/∂pred²·v at all {p0.size - int(at_kink.sum())} "
                    f"entries{skipped} in {dt.name} (worst {stats.get('max_error_ratio', 0):.3g} of the derived bound)")
    else:
        cats = list(dict.fromkeys(f.category for f in findings))
        headline = f"{loss.kind}: hvp: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    report = Report(f"{loss!r} in {dt.name}", tuple(findings), {"hvp": {**stats, "ok": ok}}, headline)
    # a dtype the hvp rejects on every call: unsupported, not a defect
    return unsupported(report, dt, [(guard, lambda other: cast_floats(args(), other))]) if findings else report


def _values(loss: Loss, out: np.ndarray, want: np.ndarray, bound: np.ndarray, shape: tuple[int, ...],
            findings: list[Finding], stats: dict[str, Any], checked: np.ndarray) -> None:
    """Entries against the exact H·v (the flat ``checked`` ones: off the kinks); a constant factor
    named (missing or wrong scale)."""
    def within(c: Any = 1) -> np.ndarray:
        return np.asarray(_within(out, want, bound, c) | ~checked, dtype=bool)

    good = within()
    with _numbers.context():
        err = np.abs(_numbers.from_floats(out.reshape(-1)) - want.reshape(-1))
        ratios = [float(e / b) if b else (0.0 if e == 0 else float("inf"))
                  for e, b, k in zip(err, bound.reshape(-1), checked) if k]
    stats["max_error_ratio"] = max(ratios, default=0.0)
    if good.all():
        return
    s = loss.scale
    if s != 1 and within(1 / s).all():
        findings.append(Finding(
            "missing_scale", f"hvp equals the unscaled ∂²L/∂pred²·v: the loss scale S = {s} is missing "
                             "(the HVP of S·L is S times the loss's)",
            expected=_numbers.to_mpf(want.reshape(-1)[0]), observed=float(out.reshape(-1)[0])))
        return
    c = _ratio(out, want)
    if c is not None and c not in (0, 1) and within(c).all():
        findings.append(Finding(
            "wrong_scale", f"hvp equals {c}·(H·v), not H·v (S = {s}, reduction={loss.reduction!r}): a factor of {c} "
                           "too many or missing (a mean's 1/n on a sum, a scale applied twice, ...)",
            expected=_numbers.to_mpf(want.reshape(-1)[0]), observed=float(out.reshape(-1)[0])))
        return
    bad = np.flatnonzero(~good)
    cells = [tuple(_index(shape, int(j))) for j in bad]
    listed = ", ".join(f"pred{_index(shape, int(j))}" for j in bad[:MAX_LISTED])
    more = f" and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
    findings.append(Finding(
        "wrong_second_derivative",
        f"hvp differs from the exact S·∂²L/∂pred²·v at {len(bad)} of {out.size} entries beyond the derived bound: "
        f"{listed}{more}",
        cells=tuple(cells[:MAX_LISTED]),
        expected=[_numbers.to_mpf(want.reshape(-1)[j]) for j in bad[:MAX_LISTED]],
        observed=[float(out.reshape(-1)[j]) for j in bad[:MAX_LISTED]]))


def own_hvp(impl: Any) -> tuple[Callable[..., Any] | None, str | None]:
    """An implementation object's ``hvp``, or None and why it is not checked."""
    hvp = impl.get("hvp") if isinstance(impl, dict) else getattr(impl, "hvp", None)
    if callable(hvp):
        return hvp, None
    return None, "hvp not checked: the implementation object has no hvp"


def finite_for_hvp(pred: Any) -> None:
    """Refuse a pred holding NaN or ±inf for an hvp, whose second derivative has no convention there."""
    try:
        values = np.asarray(pred, dtype=np.float64) if pred is not None else None
    except (TypeError, ValueError):
        return  # not floats: the exact reading names what is wrong
    if values is not None and not np.isfinite(values).all():
        j = int(np.flatnonzero(~np.isfinite(values).reshape(-1))[0])
        raise InputError(f"pred{_index(values.shape, j)} = {values.reshape(-1)[j]}: hvp= is checked at finite predictions "
                         "only (the derivative and forward take NaN and ±inf, by each kind's convention); verify the "
                         "hvp at finite inputs")
