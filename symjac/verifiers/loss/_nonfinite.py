"""verify_loss at a prediction holding NaN or ±inf: its other elements exact, its own by the kind's convention.

A loss is separable: a non-finite prediction entry reaches its own element (its row for
softmax_ce) and nothing else, so every other entry of the derivative, and every other
element of a ``"none"`` forward, is checked against its exact value within its derived
bound, as at finite inputs (the exact route evaluates the input with each non-finite entry
replaced by 1/2: :class:`symjac.loss._families.Nonfinite`). At the entries a non-finite
value reaches, the kind's :class:`~symjac.loss._domain.Convention` says what is right:

- NaN, always (IEEE propagation: what PyTorch, JAX and TensorFlow give for most kinds);
- at an element whose one non-finite entry is ±inf, the limit of the derivative (and of the
  loss) as that entry goes to ±inf (:func:`symjac.loss._families.element_limits`): an
  infinite limit exactly, a finite one within the derivative's bound at the entry ±2^64
  (where the kind's value is that limit to far more digits than the dtype holds) plus the
  exact distance between the two;
- at an element whose factor is 0 (an ignored row; an upstream of 0), 0;
- at an element whose loss does not depend on its non-finite entries (affine in the
  prediction with a derivative of exactly 0 there: nll off the labelled class), its exact
  finite loss and derivative, which are then its "limit";
- at a NaN, the kind's own answers (:data:`symjac.loss._domain.NAN_POLICIES`): the exact
  derivative where it does not depend on the entry, 0 where the kind clips to its domain,
  a value between the limits where a framework takes a comparison's branch; the loss and every
  derivative of the element at one side's limit where a hinge reads the NaN comparison as false
  (:mod:`symjac.verifiers.loss._sided`); and raising where NaN is outside the kind's domain.

A reduced forward is NaN, or the limit of the reduced loss where every affected element has
one (an infinite limit exactly; a finite one within the forward's bound at ±2^64). The
report names the policy seen per non-finite value (``stats["nonfinite"]``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.check._rounding import is_float
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds, ForwardSums
from symjac.loss._domain import NAN_POLICIES, Convention
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import LossEvaluation, evaluate_checked, to_numpy
from symjac.loss._families import NAMES, NAN, Nonfinite, constant_derivative, element_limits
from symjac.loss._spec import Loss, kind_of
from symjac.verifiers.loss._inputs import _ArgFactory
from symjac.verifiers.loss._sided import POLICY as ONE_SIDE
from symjac.verifiers.loss._sided import Sides
from symjac.verifiers.loss._values import _check_values, _Expected, _show


@dataclasses.dataclass
class _Side:
    """The exact side of one non-finite input: the evaluation at the placeholder stand-in,
    the one at ±2^64 (where an element has a limit to take), and the limits per element."""

    loss: Loss
    split: Nonfinite
    ev: LossEvaluation
    ex: _Expected
    far: LossEvaluation | None
    far_bounds: Bounds | None
    limits: dict[int, tuple[Any, list[Any]]]  # element -> (ℓ, [h_c]) at its ±inf entry's limit
    ends: dict[int, tuple[list[Any], list[Any]]]  # element -> (h at -inf, h at +inf): between_limits
    convention: Convention
    sides: Sides | None = None  # the one_side policy's limits at a NaN entry (symjac.verifiers.loss._sided)

    @functools.cached_property
    def far_derivative(self) -> np.ndarray:
        """``S·r_i·h_j`` at the ±2^64 stand-in, flat."""
        assert self.far is not None
        return self.far.derivative().reshape(-1)

    @functools.cached_property
    def far_bound(self) -> dict[int, Any]:
        """The derivative's bound at the ±2^64 stand-in, at every entry of an element with a limit."""
        assert self.far_bounds is not None
        per = self.per
        entries = np.array([i * per + k for i in sorted(self.limits) for k in range(per)], dtype=np.intp)
        return dict(zip(entries.tolist(), self.far_bounds.derivative(self.loss.scale, entries)))

    @property
    def per(self) -> int:
        return self.ev.template.classes if self.ev.kind.class_axis else 1

    def scaled(self, j: int) -> Any:
        """``S·r_i`` of flat pred entry j (MPFR)."""
        return self.ev.factor_numbers.reshape(-1)[j] * _numbers.number(self.loss.scale)

    def source(self, j: int) -> str:
        """The non-finite entry that reaches flat pred entry j, as messages name it."""
        i, per = j // self.per, self.per
        codes = self.split.codes.reshape(-1)[i * per:(i + 1) * per]
        k = i * per + int(np.flatnonzero(codes)[0])
        return f"pred{_index(self.split.codes.shape, k)} = {NAMES[int(self.split.codes.reshape(-1)[k])]}"


def exact_side(loss: Loss, split: Nonfinite, l0: np.ndarray | None, u0: np.ndarray | None, dt: np.dtype[Any],
               values: bool) -> _Side:
    """Evaluate the stand-ins and take the limits (``values``: the losses too, for a forward)."""
    kind = kind_of(loss)
    convention = kind.nonfinite(loss)
    placeholder = np.where(split.codes != 0, 0.5, split.standin)
    ev = evaluate_checked(loss, placeholder, l0, u0, values=values, derivatives=True)
    bounds = Bounds(ev, dt)
    keep = np.flatnonzero(~split.entries.reshape(-1))
    with _numbers.context():
        ex = _Expected.of(ev, bounds, dt, tuple(split.codes.shape), within=keep)
    per = ev.template.classes if kind.class_axis else 1
    affected = [int(i) for i in np.flatnonzero(split.elements)]
    args = {i: [_fraction(c[i]) for c in ev.columns] for i in affected}
    limits, ends = {}, {}
    for i in affected:
        slot = split.limit_slot(int(i), per)
        if slot is not None:
            limits[i] = element_limits(loss, ev.template, args[i], *slot)
        elif _independent(ev, split, i, per):  # nll off its labelled class: ℓ and h do not see the entries
            with _numbers.context():
                limits[i] = (_numbers.to_mpf(ev.elements.reshape(-1)[i]),
                             [_numbers.to_mpf(h) for h in ev.h.reshape(-1)[i * per:(i + 1) * per]])
        elif "between_limits" in convention.at_nan and per == 1:
            ends[i] = (element_limits(loss, ev.template, args[i], 0, -1)[1],
                            element_limits(loss, ev.template, args[i], 0, 1)[1])
    far = far_bounds = None
    if limits:
        far = evaluate_checked(loss, split.standin, l0, u0, values=values, derivatives=True)
        far_bounds = Bounds(far, dt)
    sides = Sides.of(ev, split, l0, u0, dt, values, args) if ONE_SIDE in convention.at_nan else None
    return _Side(loss, split, ev, ex, far, far_bounds, limits, ends, convention, sides)


def _independent(ev: LossEvaluation, split: Nonfinite, i: int, per: int) -> bool:
    """Does element i's loss not depend on its non-finite entries at all? So where its
    derivatives do not depend on the prediction (an element affine in it: nll's ``-w_y·z_y``)
    and are exactly 0 at each of those entries: then its loss and derivative are the exact
    finite ones whatever those entries hold (PyTorch's nll_loss gathers the labelled class)."""
    if not constant_derivative(ev.template):
        return False
    codes = split.codes.reshape(-1)[i * per:(i + 1) * per]
    h = ev.h.reshape(-1)[i * per:(i + 1) * per]
    return all(h[k] == 0 for k in np.flatnonzero(codes))


def _fraction(v: Any) -> Fraction:
    return Fraction(*v.as_integer_ratio())


# ------------------------------------------------------------------ the derivative


def check_derivative(side: _Side, guard: Guard, args_of: _ArgFactory, dt: np.dtype[Any], stats: dict[str, Any],
                     findings: list[Finding]) -> np.ndarray | None:
    """One derivative call at the non-finite input: leaks, the other entries' values, the
    convention at the affected ones. Returns the output (None if unusable or refused)."""
    shape = tuple(side.split.codes.shape)
    ok, value = _call(side, guard, args_of.fresh(), "derivative", stats, findings)
    if not ok:
        return None
    arr = _float_array(value, shape)
    if arr is None:
        guard.check_output(value, shape, dt, "pred")
        return None
    affected = side.split.entries
    leaked = ~np.isfinite(arr) & ~affected
    clean = np.where(affected | leaked, 0, arr).astype(arr.dtype)
    if guard.check_output(clean, shape, dt, "pred") is None:
        return None
    if leaked.any():
        findings.append(_leak(side, arr, leaked, "derivative"))
    with _numbers.context():
        patched = arr.copy()
        at = np.flatnonzero((affected | leaked).reshape(-1))
        patched.reshape(-1)[at] = to_numpy(side.ex.value.reshape(-1)[at], dt)
    _check_values(patched.astype(dt), side.ex, side.ev, dt, stats, findings)
    _convention(side, arr, dt, stats, findings)
    return arr


def _call(side: _Side, guard: Guard, args: tuple[Any, ...], role: str, stats: dict[str, Any],
          findings: list[Finding]) -> tuple[bool, Any]:
    """One call through a guard of its own: a raise is the ``refuse`` policy where the
    convention accepts it (NaN outside the kind's domain), else its findings stand."""
    quiet: list[Finding] = []
    own = Guard(guard.fn, guard.role, guard.names, quiet, timeout=guard.timeout, restore=guard.restore)
    ok, value = own.call(*args)
    raised = [f for f in quiet if f.detail and "exception" in f.detail]
    if not ok and side.convention.refuse and raised and len(own.raises) == 1:
        stats["policy"][role] = {"nan": "refuse"}  # outside the domain: a refusal is an answer
        quiet = [f for f in quiet if f not in raised]
    findings.extend(quiet)
    return ok, value


def _float_array(value: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """The result as a float array of ``shape``, or None (the guard's checks then name why)."""
    try:
        arr = np.array(value, copy=True)
    except Exception:  # noqa: BLE001 - whatever it returned, the guard reports it
        return None
    if shape == () and arr.size == 1:
        arr = arr.reshape(())
    if arr.shape != shape or not (arr.dtype.kind == "f" or is_float(arr.dtype)):  # bfloat16's kind is "V"
        return None
    return arr


def _leak(side: _Side, arr: np.ndarray, leaked: np.ndarray, role: str) -> Finding:
    """bad_output: a non-finite value at an entry (element) whose inputs are finite."""
    shape = arr.shape
    where = np.flatnonzero(leaked.reshape(-1))
    j = int(where[0])
    if role == "derivative":
        exact = _show(side.ex.value.reshape(-1)[j])
        cell, whose = f"pred{_index(shape, j)}", "entries"
        source = side.source(int(np.flatnonzero(side.split.entries.reshape(-1))[0]))
    else:
        exact = _show(side.ev.elements.reshape(-1)[j])
        cell, whose = f"element {_index(shape, j)}", "elements"
        first = int(np.flatnonzero(side.split.elements)[0])
        source = side.source(first * side.per)
    return Finding(
        "bad_output",
        f"{role} returned {float(arr.reshape(-1)[j])} at {cell}, whose inputs are finite (exact {exact}): the non-finite "
        f"{source} reached {where.size} {whose} outside its own element (a loss is separable: a NaN or inf reaches "
        "its element alone, its row for softmax_ce)",
        cells=tuple(tuple(_index(shape, int(k))) for k in where[:8]), observed=float(arr.reshape(-1)[j]))


def _convention(side: _Side, arr: np.ndarray, dt: np.dtype[Any], stats: dict[str, Any],
                findings: list[Finding]) -> None:
    """The affected entries against the convention; the policies seen per non-finite value."""
    seen: dict[str, set[str]] = {}
    bad: list[tuple[int, str]] = []
    flat = arr.reshape(-1).astype(np.float64)
    one_side = side.sides.rows_on_one_side(flat, side.scaled) if side.sides is not None else set()
    for j in np.flatnonzero(side.split.entries.reshape(-1)):
        got = ONE_SIDE if int(j) // side.per in one_side else _derivative_policy(side, int(j), float(flat[j]))
        kind = _element_kind(side, int(j))
        if got is None:
            bad.append((int(j), _expected_text(side, int(j))))
        else:
            seen.setdefault(kind, set()).add(got)
    stats["policy"]["derivative"] = {k: "+".join(sorted(v)) for k, v in seen.items()}
    if bad:
        first, want = bad[0]
        shape = arr.shape
        findings.append(Finding(
            "wrong_values",
            f"derivative at pred{_index(shape, first)} = {float(flat[first])!r} where {side.source(first)}; "
            f"{side.loss.kind}'s convention there is {want} ({len(bad)} of {int(side.split.entries.sum())} entries a "
            "non-finite prediction reaches are off it)",
            cells=tuple(tuple(_index(shape, b[0])) for b in bad[:8]), expected=want, observed=float(flat[first])))


def _element_kind(side: _Side, j: int) -> str:
    """How stats name what reaches entry j: ``nan``, ``inf``, ``-inf`` (several: the first)."""
    i, per = j // side.per, side.per
    codes = side.split.codes.reshape(-1)[i * per:(i + 1) * per]
    return "nan" if (codes == NAN).any() else NAMES[int(codes[np.flatnonzero(codes)[0]])]


def _derivative_policy(side: _Side, j: int, o: float) -> str | None:
    """The policy an observed derivative ``o`` at affected entry j follows, or None."""
    if math.isnan(o):
        return "nan"
    i, per = j // side.per, side.per
    with _numbers.context():
        sr = side.scaled(j)
        if sr == 0 and o == 0:
            return "ignored"
        obs = _numbers.number(o)
        if i in side.limits:
            lam = side.limits[i][1][j % per]
            return "limit" if lam is not None and _near_limit(side, j, obs, sr * _numbers.from_mpf(lam)) else None
        at_nan = side.convention.at_nan
        if "zero" in at_nan and o == 0:
            return "zero"
        constant, between = constant_derivative(side.ev.template), "between_limits" in at_nan and i in side.ends
        bound = side.ex.bound(np.array([j]))[0] if constant or between else None
        if constant and abs(obs - side.ex.value.reshape(-1)[j]) <= bound:
            return "constant"
        if between:
            a, b = (sr * _numbers.from_mpf(end[j % per]) for end in side.ends[i])
            if min(a, b) - bound <= obs <= max(a, b) + bound:
                return "between_limits"
    return None


def _near_limit(side: _Side, j: int, obs: Any, lam: Any) -> bool:
    """Is ``obs`` the scaled limit ``lam`` of entry j: the same infinity, or within the bound at ±2^64?"""
    if not _numbers.finite(np.array([lam], dtype=object))[0]:
        return bool(obs == lam)
    assert side.far is not None and side.far_bounds is not None
    far, bound = side.far_derivative[j], side.far_bound[j]
    return bool(abs(obs - lam) <= bound + abs(lam - far))


def _expected_text(side: _Side, j: int) -> str:
    """What the convention accepts at entry j, for a message."""
    i = j // side.per
    options = ["NaN"]
    with _numbers.context():
        if i in side.limits:
            lam = side.limits[i][1][j % side.per]
            if lam is not None:
                options.append(f"the limit {_show(side.scaled(j) * _numbers.from_mpf(lam))}")
        else:
            if constant_derivative(side.ev.template):
                options.append(f"the exact {_show(side.ex.value.reshape(-1)[j])}")
            options += [NAN_POLICIES[p] for p in side.convention.at_nan if p != "between_limits"]
            if "between_limits" in side.convention.at_nan and i in side.ends:
                a, b = (side.scaled(j) * _numbers.from_mpf(end[j % side.per]) for end in side.ends[i])
                options.append(f"a value in [{_show(min(a, b))}, {_show(max(a, b))}]")
    return " or ".join(options)


# ------------------------------------------------------------------ the forward


def check_forward(side: _Side, guard: Guard, args_of: _ArgFactory, dt: np.dtype[Any], stats: dict[str, Any],
                  findings: list[Finding]) -> None:
    """One forward call at the non-finite input: ``"none"``: per element as the derivative's
    entries; reduced: NaN or the limit of L."""
    none = side.loss.reduction == "none"
    shape = tuple(side.ev.element_shape) if none else ()
    ok, value = _call(side, guard, args_of.forward_args(), "forward", stats, findings)
    if not ok:
        return
    arr = _float_array(value, shape)
    if arr is None:
        guard.check_output(value, shape, None, "loss")
        return
    if none:
        _forward_elements(side, arr, dt, stats, findings)
        return
    got, want = float(arr), _reduced_limit(side)
    policy = "nan" if math.isnan(got) else "limit" if want is not None and want(got) else None
    if policy is None:
        findings.append(Finding("forward_values", f"forward returned {got!r} where the prediction holds "
                                f"{_holds(side)}: {side.loss.kind}'s convention is a NaN loss"
                                f"{' or the limit of L' if want is not None else ''}", observed=got))
    else:
        stats["policy"]["forward"] = {"reduced": policy}


def _holds(side: _Side) -> str:
    codes = side.split.codes
    return ", ".join(f"{int((codes == c).sum())} {NAMES[c]}" for c in sorted(NAMES) if (codes == c).any())


def _reduced_limit(side: _Side) -> Any:
    """A test ``o -> bool`` for the reduced loss's limit, or None where there is none (a NaN,
    an element without a limit, limits +inf and -inf)."""
    affected = [int(i) for i in np.flatnonzero(side.split.elements) if side.ev.counted.reshape(-1)[i]]
    if side.sides is not None:  # a NaN element at one of its sides' limits, the others at theirs
        fixed = {i: side.limits[i][0] if i in side.limits else None for i in affected if i not in side.sides.limits}
        return side.sides.reduced_test(fixed, side.ev.denominator)
    got = [side.limits[i][0] if i in side.limits else None for i in affected]
    if any(lam is None for lam in got) or side.far is None or side.far_bounds is None:
        return None
    lams = [lam for lam in got if lam is not None]
    infinite = {math.copysign(1, float(lam)) for lam in lams if not math.isfinite(float(lam))}
    if len(infinite) > 1:
        return None
    if infinite:
        target = math.copysign(math.inf, infinite.pop())
        return lambda o: o == target
    with _numbers.context():
        sums = ForwardSums(side.far_bounds, full=True)
        phi, bound = sums.at()
        den = _numbers.number(side.ev.denominator)
        for i, lam in zip(affected, lams):
            phi = phi + (_numbers.from_mpf(lam) - side.far.elements.reshape(-1)[i]) / den
    return lambda o: bool(abs(_numbers.number(o) - phi) <= bound)


def _forward_elements(side: _Side, arr: np.ndarray, dt: np.dtype[Any], stats: dict[str, Any],
                      findings: list[Finding]) -> None:
    """A ``"none"`` forward: the finite elements within their bound, the others by the convention."""
    flat = arr.reshape(-1).astype(np.float64)
    affected = side.split.elements
    leaked = ~np.isfinite(flat) & ~affected
    with _numbers.context():
        rounded = to_numpy(side.ev.elements.reshape(-1), dt).astype(np.float64)
        leaked &= ~(np.isinf(flat) & (flat == rounded))  # the exact loss overflows the dtype: inf is right
    if leaked.any():
        findings.append(_leak(side, arr, leaked.reshape(arr.shape), "forward"))
    bounds = Bounds(side.ev, dt)
    keep = np.flatnonzero(~affected & ~leaked & np.isfinite(flat))
    bounds.fill(keep, of="loss")
    seen: dict[str, set[str]] = {}
    with _numbers.context():
        exact = side.ev.elements.reshape(-1)
        err = bounds.element(exact[keep], bounds.cond[keep], bounds.run[keep])
        off = keep[np.asarray(np.abs(_numbers.from_floats(flat[keep]) - exact[keep]) > err, dtype=bool)]
        wrong = [int(i) for i in off]
        for k in np.flatnonzero(affected):
            policy = _loss_policy(side, int(k), float(flat[k]), bounds)
            if policy is None:
                wrong.append(int(k))
            else:
                seen.setdefault(_element_kind(side, int(k) * side.per), set()).add(policy)
    stats["policy"]["forward"] = {k: "+".join(sorted(v)) for k, v in seen.items()}
    if wrong:
        i = wrong[0]
        shape = arr.shape
        why = (f"exact {_show(exact[i])}" if not affected[i] else
               f"{side.source(i * side.per)}; the convention is NaN or the loss's limit")
        findings.append(Finding("forward_values", f"forward element {_index(shape, i)} = {float(flat[i])!r}; {why} "
                                f"({len(wrong)} element(s) off)", window=tuple(_index(shape, i)),
                                observed=float(flat[i])))


def _loss_policy(side: _Side, i: int, o: float, bounds: Bounds) -> str | None:
    """The policy a ``"none"`` forward's value at affected element i follows, or None."""
    if math.isnan(o):
        return "nan"
    if not side.ev.counted.reshape(-1)[i] and o == 0:
        return "ignored"
    if side.sides is not None and i in side.sides.limits:
        return ONE_SIDE if side.sides.loss_on_one_side(i, o) else None
    if i not in side.limits or side.limits[i][0] is None:
        return None
    lam = _numbers.from_mpf(side.limits[i][0])
    if not _numbers.finite(np.array([lam], dtype=object))[0]:
        return "limit" if _numbers.number(o) == lam else None
    assert side.far is not None and side.far_bounds is not None
    side.far_bounds.fill(np.array([i]), of="loss")
    far = side.far.elements.reshape(-1)[i]
    err = side.far_bounds.element(far, side.far_bounds.cond[i], side.far_bounds.run[i])
    return "limit" if abs(_numbers.number(o) - lam) <= err + abs(lam - far) else None


# ------------------------------------------------------------------ the entry


def check_nonfinite(loss: Loss, derivative: Any, forward: Any, p0: np.ndarray, l0: np.ndarray | None,
                    u0: np.ndarray | None, dt: np.dtype[Any], timeout: float | None,
                    split: Nonfinite) -> tuple[list[Finding], dict[str, Any], np.ndarray | None, np.ndarray, np.ndarray]:
    """One derivative call (and one forward call) at a prediction holding NaN or ±inf:
    ``(findings, stats, the derivative's output, the exact S·dL/dpred and dL/dpred)``, NaN
    where a non-finite prediction reaches; ``stats["nonfinite"]`` names the policy seen per
    non-finite value and the kind's measured convention."""
    findings: list[Finding] = []
    stats: dict[str, Any] = {"policy": {}}
    side = exact_side(loss, split, l0, u0, dt, values=forward is not None)
    args_of = _ArgFactory(loss, p0, l0, u0)
    deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
    with _numbers.context():
        out = check_derivative(side, deriv, args_of, dt, stats, findings)
        if forward is not None:
            fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
            check_forward(side, fwd, args_of, dt, stats, findings)
    codes = split.codes
    stats["nonfinite"] = {
        "entries": {NAMES[c]: int((codes == c).sum()) for c in sorted(NAMES) if (codes == c).any()},
        "reached": int(split.entries.sum()),
        "policy": stats.pop("policy"),
        "convention": side.convention.evidence,
    }
    with _numbers.context():
        reached = split.entries.reshape(split.codes.shape)
        expected, base = (np.where(reached, _numbers.number(math.nan), a) for a in (side.ex.value, side.ex.base))
    return findings, stats, out, expected, base
