"""The forward's fast route, shared part: the enclosure of the reduced loss and its
forward bound, and the finite-difference probes at the exact route's stencils.

:mod:`symjac.verifiers.loss.fast._forward` proves a forward within its bound with these,
:mod:`symjac.verifiers.loss.fast._forward_fail` beyond it; the derivations are in their
docstrings. Each probe's tolerance is enclosed: ``tol_lo <= tol <= tol_hi`` for the
exact route's ``tol`` (:meth:`symjac.verifiers.loss._fd._ForwardCheck.judge`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import kind_of
from symjac.verifiers.loss.fast._filter import _Setting
from symjac.verifiers.loss._fd import probe_entries, stencil
from symjac.verifiers.loss._inputs import _ArgFactory

_MARGIN = 2.0**-40  # relative: well above the MPFR roundings (2^-200) in which the exact route forms the same numbers


@dataclasses.dataclass(frozen=True)
class Enclosure:
    """The reduced loss ``L`` within ``big_e`` of ``big_l``, and the forward bound's parts:
    lower (``_lo``) and upper (``_hi``; None where a kind gives no upper bounds) bounds of
    ``r``, ``γ_{n-1}``, ``γ_{k_D}``, ``Σ|ℓ_i|``, ``Σ e_i``, and of the bound itself
    (:class:`symjac.loss._bounds.ForwardSums`, full)."""

    big_l: float
    big_e: float
    n: int
    r: tuple[float, float]
    g_n: tuple[float, float]
    g_d: tuple[float, float]
    eta: float  # (n + k_D)·η, the bound's underflow term (exact: a small multiple of η)
    abs_sum: tuple[float, float | None]
    err_sum: tuple[float, float | None]
    bound_lo: float
    bound_hi: float | None


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probe: flat pred entry ``j``, the central difference ``fd`` (exactly as the exact
    route forms it), the derivative there, ``|g - fd|`` and the tolerance's enclosure."""

    j: int
    fd: Any
    observed: float
    miss: Any
    tol_lo: Any
    tol_hi: Any


def probes(s: _Setting, fwd: Guard, args_of: _ArgFactory, out: np.ndarray, enc: Enclosure, u: float,
           findings: list[Finding], forward_ok: bool) -> tuple[list[Probe], int] | None:
    """The exact route's probes (:meth:`symjac.verifiers.loss._fd._ForwardCheck.finite_differences`):
    (the checked probes, the number probed), or None (a call misbehaved, or -- ``forward_ok``
    -- the forward at a stencil point is not proven within its bound there, which the exact
    route would report).

    ``forward_ok`` (a forward proven within): ``tol_lo`` takes the derivative bound as 0 and
    ``tol_hi`` is None. Else (a forward proven beyond: the exact route checks no stencil
    value) the derivative bound at the entry is evaluated exactly and ``tol_hi`` uses the
    upper sums of ``enc``."""
    kind = kind_of(s.loss)
    pred = args_of.pred
    size = int(pred.size)
    probed = probe_entries(size)
    flat_out = out.reshape(-1)
    got: list[Probe] = []
    summed = dataclasses.replace(s.loss, reduction="sum")
    for j in probed:
        z = float(pred.reshape(-1)[j])
        around = stencil(kind, s.loss, z, s.dt, u)
        if around is None:
            continue
        zp, zm, step = around
        i = j // s.per
        exact = _element(s, summed, i, j % s.per, (z, float(zp), float(zm)), not forward_ok)
        ells, errs, h_j, b_j = exact
        obs = []
        for zz in (zp, zm):
            pz = pred.copy()
            pz.reshape(-1)[j] = zz
            label = args_of.label
            assert label is not None
            val = fwd.array(pz.copy(), label.copy(), shape=(), dtype=None, index_name="loss", reference=(pz, label))
            del pz
            if val is None or findings:
                return None
            obs.append(float(np.asarray(val, dtype=np.float64).reshape(-1)[0]))
        with _numbers.context():
            num = _numbers.number
            r, sc, dstep = num(s.r), num(s.loss.scale), num(step)
            trunc = r * (ells[1] - ells[2]) / dstep - r * h_j
            # E± >= r·(Σ_{m≠i} e_m + e_i(z±) + γ_{n-1}·(Σ_{m≠i} |ℓ_m| + |ℓ_i(z±)|)) + γ_{k_D}·|Φ(z±)·r|:
            # the blocks' lower sums less element i's exact terms at z, plus its exact terms at z±;
            # E± <= the same with the upper sums and factors, |Φ(z±)·r| by its upper end, plus (n + k_D)·η
            big_l, big_e = num(enc.big_l), num(enc.big_e)
            phi = [big_l + r * (ells[m] - ells[0]) for m in (1, 2)]  # Φ(z±)·r, within big_e
            e_lo = [_forward_bound(enc, 0, ells, errs, m, abs(p_) - big_e) for m, p_ in zip((1, 2), phi)]
            if forward_ok:
                for o, p_, e in zip(obs, phi, e_lo):  # the forward at z± against the exact value there
                    if abs(num(o) - p_) + big_e > e:
                        return None
            fd = sc * (num(obs[0]) - num(obs[1])) / dstep
            observed = float(flat_out[j])
            miss = abs(num(observed) - fd)
            tol_lo = sc * (abs(trunc) + (e_lo[0] + e_lo[1]) / dstep)
            tol_hi = None
            if not forward_ok:
                e_hi = [_forward_bound(enc, 1, ells, errs, m, abs(p_) + big_e) for m, p_ in zip((1, 2), phi)]
                if any(e is None for e in e_hi):
                    return None
                tol_lo = (b_j + tol_lo) * num(1 - _MARGIN)
                tol_hi = (b_j + sc * (abs(trunc) + (e_hi[0] + e_hi[1]) / dstep)) * num(1 + _MARGIN)
        got.append(Probe(j, fd, observed, miss, tol_lo, tol_hi))
    return got, len(probed)


def _forward_bound(enc: Enclosure, side: int, ells: list[Any], errs: list[Any], m: int, phi_abs: Any) -> Any:
    """E at the stencil point ``m`` (1: z+, 2: z-), bounded below (``side`` 0: its float64
    parts deflated by 2^-40, at least 0) or above (1: inflated; None without upper sums)."""
    num = _numbers.number
    abs_sum, err_sum = enc.abs_sum[side], enc.err_sum[side]
    if abs_sum is None or err_sum is None:
        return None
    r, g_n, g_d = num(enc.r[side]), num(enc.g_n[side]), num(enc.g_d[side])
    got = (r * (num(err_sum) - errs[0] + errs[m] + g_n * (num(abs_sum) - abs(ells[0]) + abs(ells[m])))
           + g_d * max(phi_abs, num(0)))
    if side == 0:
        return max(got, num(0)) * num(1 - _MARGIN)
    return (got + num(enc.eta)) * num(1 + _MARGIN)


def _element(s: _Setting, summed: Any, i: int, slot: int, zs: tuple[float, float, float],
             derivative_bound: bool) -> tuple[list[Any], list[Any], Any, Any]:
    """The exact ``ℓ_i`` and its forward bound ``e_i`` at pred entry ``slot`` of element ``i``
    set to each of ``zs``, ``dℓ_i/dz`` there at the first (MPFR), and (``derivative_bound``)
    the derivative bound ``B_j`` of that entry at the first, else 0.

    The element is evaluated alone (for an element-wise kind with an option per column: its
    whole row, which keeps the columns) under "sum". ``B_j`` is
    :meth:`symjac.loss._bounds.Bounds.derivative` of that evaluation with the loss's own ``k`` (its reduction's roundings) and ``S·r`` as the scale
    (the evaluation's factor is 1): the exact route's formula at the same numbers."""
    lo, at = i, slot  # the evaluated stretch of elements starts at lo; the entry is at ``at`` in its first row
    stop = i + 1
    if s.z.ndim == 1 and s.row is not None:  # a per-column option: the element's whole row keeps its columns
        lo = i - i % s.row
        stop, at = lo + s.row, i - lo
    rows = []
    for zz in zs:
        zb = np.array(s.z[lo:stop], dtype=np.float64).reshape(1, -1) if s.z.ndim == 1 else \
            np.array(s.z[lo:stop], dtype=np.float64)
        zb.reshape(-1)[at] = zz
        rows.append(zb)
    zb = np.concatenate(rows)
    y_row = s.y[lo:stop].reshape(1, -1) if s.z.ndim == 1 else s.y[lo:stop]
    yb = np.concatenate([y_row] * 3)
    ev = evaluate_checked(summed, zb, yb, None, values=True, derivatives=True)
    bounds = Bounds(ev, s.dt)
    element = at // s.per
    picked = np.arange(3) * (stop - lo) + element  # the element at z, z+, z-
    bounds.fill(picked, of="loss")
    cells = ev.elements.reshape(-1)[picked]
    ells = list(cells)
    errs = list(np.asarray(bounds.element(cells, bounds.cond[picked], bounds.run[picked]), dtype=object).reshape(-1))
    b_j: Any = _numbers.number(0)
    if derivative_bound:
        bounds.k_deriv = s.k
        b_j = bounds.derivative(s.loss.scale * s.r, np.array([at], dtype=np.intp))[0]
    return ells, errs, ev.h.reshape(-1)[at], b_j

