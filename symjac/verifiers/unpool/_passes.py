"""Max unpooling's checks at one input shape and family: forward, backward, jvp, double backward.

Every expected value is exact in the dtype (a copy of x or dy, or 0), so every comparison is
bitwise (NaN equals NaN where the exact value is NaN): no tolerance enters a verdict. The
implementation is called only through the guarded call (:class:`symjac.check._call.Guard`):
``forward(x, indices)``, ``backward(x, indices, dy)``, ``jvp(x, indices, t)``,
``double_backward(x, indices, dy, v) -> (ddx, ddy)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.pool._ops.unpool import Scatter
from symjac.verifiers.unpool._diagnose import forward_findings, jacobian_findings
from symjac.verifiers.unpool._inputs import RECOVER_LIMIT, RECOVERED, dense


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, NaN equal to NaN (0 and -0 are one value)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return bool(((a64 == b64) | (np.isnan(a64) & np.isnan(b64))).all())


@dataclasses.dataclass
class Guards:
    """The implementation's callables, each behind its guard (None: not given or not selected)."""

    forward: Guard | None
    backward: Guard | None
    jvp: Guard | None
    double_backward: Guard | None
    findings: list[Finding]

    def finish(self) -> None:
        for g in (self.forward, self.backward, self.jvp, self.double_backward):
            if g is not None:
                g.finish()


@dataclasses.dataclass
class Pass:
    """One shape and family: the scatter, x, the family's name and its seed."""

    s: Scatter
    x: np.ndarray
    family: str
    seed: int
    dt: np.dtype[Any]

    @property
    def whole(self) -> bool:
        """Whether the derivatives are recovered whole here (one call per output or input cell)."""
        return self.family in RECOVERED and self.s.n_out <= RECOVER_LIMIT


def check_forward(p: Pass, guard: Guard, findings: list[Finding], note: str) -> bool:
    """The forward at x, bitwise against the exact one; at a recovered family called twice (equal calls
    must agree: a write order that varies between calls is nondeterminism). Then the forward's own
    difference ``f(x + d) - f(x) = J d`` at an exact integer step d (finite differences of a linear map)."""
    s, exact = p.s, p.s.forward(p.x)
    # x holding NaN or ±inf: any output may come back non-finite, and the comparison names what went where
    nonfinite = np.full(s.output_shape, not np.isfinite(p.x.astype(np.float64)).all())
    y = guard.array(p.x, s.indices, shape=s.output_shape, dtype=p.dt, nonfinite=nonfinite, shape_note=note)
    if y is None:
        return False
    found = forward_findings(s, p.x, y, exact, p.family)
    findings.extend(found)
    if p.whole:
        again = guard.array(p.x, s.indices, shape=s.output_shape, dtype=p.dt, nonfinite=nonfinite)
        if again is not None:
            guard.compare(y, again)
    if found or not np.isfinite(p.x.astype(np.float64)).all() or np.abs(p.x.astype(np.float64)).max() > 254:
        return not found
    step = dense(s.input_shape, p.dt, p.seed + 7, top=2)
    moved_x = (p.x + step).astype(p.dt)
    moved = guard.array(moved_x, s.indices, shape=s.output_shape, dtype=p.dt)
    if moved is None or same(moved.astype(np.float64) - y.astype(np.float64), s.jvp(step).astype(np.float64)):
        return moved is not None
    said = "its own difference f(x + d) - f(x) at an exact step d is not J d (right at x, not at x + d)"
    findings.extend(dataclasses.replace(f, category="not_fd_consistent", message=f"{said}; at x + d: {f.message}")
                    for f in forward_findings(s, moved_x, moved, s.forward(moved_x), p.family))
    return False


def _recover(p: Pass, guard: Guard, rows: bool, role: str) -> np.ndarray | None:
    """The implementation's Jacobian, one call per output cell (``rows``: one-hot dy into the backward)
    or per input cell (one-hot tangents into the jvp); None when a call gave nothing usable."""
    s = p.s
    n = s.n_out if rows else s.n_in
    obs = np.zeros((s.n_out, s.n_in))
    shape_in, shape_out = (s.output_shape, s.input_shape) if rows else (s.input_shape, s.output_shape)

    def one_hot(i: int) -> np.ndarray:
        e = np.zeros(n, dtype=p.dt)
        e[i] = 1
        return e.reshape(shape_in)

    results = guard.arrays(((p.x, s.indices, one_hot(i)) for i in range(n)), shape=shape_out, dtype=p.dt)
    for i, got in enumerate(results):
        if got is None:
            return None
        if rows:
            obs[i] = got.reshape(-1).astype(np.float64)
        else:
            obs[:, i] = got.reshape(-1).astype(np.float64)
    return obs


def check_linear(p: Pass, guard: Guard, findings: list[Finding], role: str, dy: np.ndarray | None = None) -> bool:
    """The backward (``role="backward"``: ``J^T dy``) or the jvp (``J t``): recovered whole at the
    recovered families, else at two dense exact arguments (recovered whole where one differs);
    a caller's ``dy`` is one more dense call."""
    s = p.s
    rows = role == "backward"
    if p.whole:
        obs = _recover(p, guard, rows, role)
        if obs is None:
            return False
        found = jacobian_findings(s, obs, role, p.family)
        findings.extend(found)
        return not found
    shape_in, shape_out = (s.output_shape, s.input_shape) if rows else (s.input_shape, s.output_shape)
    args = [dense(shape_in, p.dt, p.seed + k) for k in (1, 2)] + ([dy] if dy is not None else [])
    for arg in args:
        got = guard.array(p.x, s.indices, arg, shape=shape_out, dtype=p.dt)
        if got is None:
            return False
        if not same(got, s.vjp(arg) if rows else s.jvp(arg)):
            obs = _recover(p, guard, rows, role) if s.n_out <= RECOVER_LIMIT else None
            found = jacobian_findings(s, obs, role, p.family) if obs is not None else []
            findings.extend(found or [Finding("wrong_cells", f"{role}: differs from the exact "
                                              f"{'J^T dy' if rows else 'J t'} at a dense argument",
                                              family=p.family, detail={"role": role})])
            return False
    return True


def check_double_backward(p: Pass, guard: Guard, findings: list[Finding]) -> bool:
    """``double_backward(x, indices, dy, v) -> (ddx, ddy)``: ddy must be ``J v`` and ddx 0 (y is linear
    in x), at two dense exact (dy, v)."""
    s = p.s
    for k in (1, 2):
        dy, v = dense(s.output_shape, p.dt, p.seed + 10 * k), dense(s.input_shape, p.dt, p.seed + 10 * k + 1)
        ok, value = guard.call(p.x, s.indices, dy, v)
        if not ok:
            return False
        if not (isinstance(value, (tuple, list)) and len(value) == 2):
            guard.flag("pair", "bad_output", f"double_backward returned {type(value).__name__}, not (ddx, ddy)")
            return False
        ddx = guard.check_output(value[0], s.input_shape, p.dt, "ddx")
        ddy = guard.check_output(value[1], s.output_shape, p.dt, "ddy")
        if ddx is None or ddy is None:
            return False
        if (ddx != 0).any():
            findings.append(Finding("wrong_second_derivative", "double backward: ddx is not 0 (max unpooling is "
                                    "linear in x: its second derivative is 0)", family=p.family,
                                    detail={"role": "double_backward"}))
            return False
        if not same(ddy, s.jvp(v)):
            findings.append(Finding("wrong_cells", "double backward: ddy differs from J v (the derivative of "
                                    "<v, J^T dy> with respect to dy)", family=p.family,
                                    detail={"role": "double_backward"}))
            return False
    return True
