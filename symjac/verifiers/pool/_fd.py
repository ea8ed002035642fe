"""The second oracle: compressed one-sided differences of the implementation's own forward.

Inputs that feed no common window are perturbed together (Curtis–Powell–Reid), so
the cost is one forward call per input colour, plus the forward at x (the forward
check's call). Pooling is piecewise linear, so off its kinks the one-sided
difference ``(f(x + h·e) - f(x))/h`` is the derivative up to rounding, as a central
difference would be at twice the calls: a max window whose maximum leads the
runner-up by more than h keeps its maximal cell (raising it keeps it maximal,
raising another cell by h leaves it below). With h = 1/2 every perturbed input
stays exact in the dtype (checked), and each forward output carries at most
``B_w = γ_{n+1}·Σ|x|/d`` (avg; max is exact), so the difference is within
``(B_w(x + h·e) + B_w(x))/h``.

A smooth operator (lp) is not piecewise linear: its rule ``fd_error`` adds the
one-sided difference's curvature error (Taylor: ``(h/2)·max|∂²y/∂x_k²|`` over the
step) and its forward's rounding at both points, at its own step ``fd_step``
(about √u: curvature O(h), rounding O(u/h)); windows whose step reaches an
all-zero window (S = 0) are not bounded and not compared.

Large windows need many input colours (a k×k stride-1 pool k², a global pool one
per cell). Above :data:`MAX_COLOURS`, the oracle checks directional derivatives
instead: for a few random sign vectors v, every window's ``(f(x + hv) - f(x))/h``
against the observed row times v — :data:`DIRECTIONS` forward calls at any window
size, and a wrong row passes only if its error is orthogonal to every v.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._lastaxis import any_last, count_last
from symjac.check._report import Finding, fmt_index, listing
from symjac.check._rounding import gamma
from symjac.pool._graph import input_colouring
from symjac.pool._symbolic import lines
from symjac.pool._rows import Rows, tolerance, window_blocks
from symjac.pool._stamp import window_mass

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

STEP = 0.5  # h: windows whose max leads the runner-up by more than h are usable
MAX_COLOURS = 32  # above this many input colours, check directions rather than entries
DIRECTIONS = 3
#: Up to this many (batch, window, slot) entries (48x48 3x3 has 20,736) the FD rows are computed
#: on the whole grid at once: a few (B, W, K) temporaries of at most 256 KB each, where the
#: per-line steps cost more than the arithmetic. Above it a line of the grid at a time, with
#: O(line) temporaries (verify's peak memory stays near its (B, W, K) rows).
AT_ONCE = 2**15
#: forward_each(xs) -> the implementation's forward at each x (layout), or None when unusable (read no further
#: then); the xs are read as the calls go, in the thread that makes them.
ForwardEach = Callable[[Iterable[np.ndarray]], Generator["np.ndarray | None", None, None]]


def _exact_step(xc: np.ndarray, step: np.ndarray | float, dtype: np.dtype[Any]) -> bool:
    """``x + step`` holds exactly in float64 and in the dtype (at |x| >= 2^53, ``x + 1/2`` rounds
    back to x in float64 itself: a zero slope that is no finding). Where x + step is exact the
    float64 difference ``(x + step) - x`` is ``step`` exactly; where it is not, it is not."""
    moved = xc + step
    return bool(np.array_equal(moved - xc, np.broadcast_to(step, moved.shape))
                and np.array_equal(moved.astype(dtype), moved))


def finite_differences(g: Geometry, forward_each: ForwardEach, x: np.ndarray,
                       y: np.ndarray, dtype: np.dtype[Any], u: float) -> tuple[np.ndarray, np.ndarray] | None:
    """FD Jacobian rows (B, W, K) and their error bounds from the forward's output ``y`` at x
    (canonical (B, W)), or None when the forward failed or ``x + h`` is not exact in the dtype."""
    h = g.operator.fd_step(dtype)
    xc = g.to_canonical(x).astype(np.float64)
    if not _exact_step(xc, h, dtype):
        return None
    in_colours, n = input_colouring(g)
    smooth = g.operator.fd_error(g, x, h, in_colours, dtype)  # lp: curvature and its forward's rounding
    plus = []
    calls = forward_each(g.from_canonical(xc + h * (in_colours == colour), g.in_spatial).astype(dtype)
                         for colour in range(n))
    for y_plus in calls:
        if y_plus is None:
            calls.close()
            return None
        plus.append(g.to_canonical(y_plus, g.out_spatial))
    # Each window reads at most one cell of a colour, so pair (w, k) reads its slope off
    # the call that moved the colour of its cell: one gather a line (O(line) temporaries).
    moved = np.stack(plus)  # (colours, B, W): at most 32 x W values, no more than fd itself
    avg = g.operator.fd_rounding()  # the forward rounds: its bound enters each slope's error
    if avg:  # Σ|x + h·e| + Σ|x| over the window: only its one cell of the moved colour differs
        base = np.zeros((g.batch, g.n_out))
        for line in lines(g):  # Σ|x| over each window
            if line.window is None:
                base[:, line.w] += np.abs(xc[:, line.cells])
            else:
                base[:, line.window] += np.abs(xc[:, line.cells]).sum(axis=1)
        n_cells = count_last(g.valid)
        # γ_{n+1} for each window size n once (a table of K + 1; gamma is elementwise, so
        # the same values as γ of a line's sizes), not once a line
        gamma_of = gamma(np.arange(g.cells.shape[1] + 1) + 1, u)
    if g.batch * g.cells.size <= AT_ONCE:  # small grids: the same arithmetic on all pairs at once
        valid, cells, w = g.valid, g.cells, np.arange(g.n_out)[:, None]
        slope = (moved[in_colours[cells], :, w].transpose(2, 0, 1) - y[:, :, None]) / h  # (B, W, K)
        err = 2.0**-52 * np.abs(slope)
        if avg:
            xv = xc[:, cells]
            err += gamma_of[n_cells][:, None] * (2 * base[:, :, None] - np.abs(xv) + np.abs(xv + h)) \
                / g.divisor[:, None] / h
        if smooth is not None:
            err = err + smooth
        return np.where(valid, slope, 0.0), np.where(valid, err, 0.0)
    fd = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
    tol = np.zeros_like(fd)
    for line in lines(g):
        w, k, cells = line.w, line.k, line.cells
        slope = (moved[in_colours[cells], :, w].T - y[:, w]) / h  # (B, len(line))
        err = 2.0**-52 * np.abs(slope)
        if avg:
            xv = xc[:, cells]
            err += gamma_of[n_cells[w]] * (2 * base[:, w] - np.abs(xv) + np.abs(xv + h)) / g.divisor[w] / h
        fd[:, w, k] = slope
        tol[:, w, k] = err if smooth is None else err + smooth[:, w, k]
    return fd, tol


def _window_error(g: Geometry, xp: np.ndarray, x: np.ndarray, u: float) -> np.ndarray | float:
    """The forward's rounding bound at x + h·v and x, over h: ``γ_{n+1}·(Σ|x + h·v| + Σ|x|)/(d·h)`` (avg)."""
    if not g.operator.fd_rounding():
        return 0.0
    mass = sum(window_mass(g, np.abs(a)) for a in (xp, x)) / g.divisor
    return np.asarray(gamma(g.valid.sum(axis=1) + 1, u) * mass / STEP)


def directional_fd(g: Geometry, forward_each: ForwardEach, x: np.ndarray, y: np.ndarray,
                   dtype: np.dtype[Any], u: float, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """Per random sign direction v: (v, slope (B, W), error bound (B, W)) from the forward's output
    ``y`` at x (canonical (B, W)), or None when the forward failed or ``x + h·v`` is not exact in the dtype."""
    if not g.operator.fd_directions:
        return None  # a smooth operator's error model (lp's curvature) is per coordinate step
    h = STEP
    xc = g.to_canonical(x).astype(np.float64)
    rng = np.random.default_rng(seed)
    vs = [rng.choice(np.array([-1.0, 1.0]), size=xc.shape) for _ in range(DIRECTIONS)]
    moved = [xc + h * v for v in vs]
    if any(not _exact_step(xc, h * v, dtype) for v in vs):
        return None
    out = []
    calls = forward_each(g.from_canonical(xp, g.in_spatial).astype(dtype) for xp in moved)
    for plus, v, xp in zip(calls, vs, moved):  # calls first: read to its end
        if plus is None:
            calls.close()
            return None
        slope = (g.to_canonical(plus, g.out_spatial) - y) / h
        out.append((v, slope, _window_error(g, xp, xc, u) + 2.0**-52 * np.abs(slope)))
    return out


def check_fd_directions(g: Geometry, rows: Rows, found: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                        usable: np.ndarray, u: float, findings: list[Finding]) -> bool:
    """Observed rows times each direction vs the directional differences."""
    bad = np.zeros(usable.shape, dtype=bool)
    first: tuple[float, float] | None = None
    for v, _, _ in found:
        assert np.all(np.abs(v) == 1), "directional FD directions are sign vectors"
    # Directions are sign vectors, so |v_k| is 1 on every valid slot (and rows are 0 on
    # the others): the rounding terms sum |row| and tolerance(row) over the window,
    # the same for every direction. In blocks of windows (window_blocks).
    extended = [np.concatenate([v, np.zeros(v.shape[:-1] + (1,))], axis=-1) for v, _, _ in found]  # cell -1: 0
    predicted = [np.empty(rows.obs.shape[:2]) for _ in found]
    weights = np.empty(rows.obs.shape[:2])
    for block in window_blocks(rows.obs.shape):
        obs = rows.obs[:, block]
        weights[:, block] = tolerance(obs, u).sum(axis=2) + gamma(g.cells.shape[1], 2.0**-53) * np.abs(obs).sum(axis=2)
        cells = g.cells[block]
        for ext, out in zip(extended, predicted):
            out[:, block] = (obs * ext[..., cells]).sum(axis=2)
    for (_, slope, err), pred in zip(found, predicted):
        tol = err + weights
        off = np.abs(pred - slope) > tol
        for b, w in rows.stray:
            off[b, w] = True
        if first is None and (off & usable).any():
            b, w = np.argwhere(off & usable)[0].tolist()
            first = (float(slope[b, w]), float(pred[b, w]))
        bad |= off
    where = np.argwhere(bad & usable)
    if where.size:
        assert first is not None
        names = [fmt_index(g.output_index(b, w)) for b, w in where.tolist()]
        b, w = where[0].tolist()
        findings.append(Finding(
            "not_fd_consistent",
            f"backward disagrees with finite differences of its own forward along random directions at "
            f"{len(where)} windows: {listing(names)}",
            window=g.output_index(b, w), expected=[first[0]], observed=[first[1]]))
    return not where.size


def check_fd(g: Geometry, rows: Rows, fd: np.ndarray, fd_tol: np.ndarray, usable: np.ndarray, u: float,
             findings: list[Finding]) -> bool:
    """Backward rows vs finite differences, on the ``usable`` windows (FD exact enough there)."""
    bad = any_last((np.abs(rows.obs - fd) > fd_tol + tolerance(rows.obs, u)) & g.valid[None])
    for key in rows.stray:
        bad[key] = True
    where = np.argwhere(bad & usable)
    if where.size:
        names = [fmt_index(g.output_index(b, w)) for b, w in where.tolist()]
        b, w = where[0].tolist()
        valid = g.valid[w]
        findings.append(Finding(
            "not_fd_consistent",
            f"backward disagrees with finite differences of its own forward at {len(where)} windows: {listing(names)}",
            window=g.output_index(b, w), cells=tuple(g.input_index(b, int(c)) for c in g.cells[w][valid]),
            expected=[float(v) for v in fd[b, w][valid]], observed=[float(v) for v in rows.obs[b, w][valid]]))
    return not where.size
