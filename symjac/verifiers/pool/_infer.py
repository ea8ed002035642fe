"""Convention inference: which neighbouring spec does an implementation compute exactly?

Frameworks differ in small conventions: where SAME puts its odd pad cell (upper or
lower), whether pad cells count in an average's divisor, the ceil rule for the
output size, the layout, the tie policy of max pooling. ``infer`` checks an
implementation against every combination of these around the arguments given and
returns each spec whose exact forward (and, with a backward, whose exact Jacobian)
the implementation matches; ``hint`` does the same one field away from a spec a
verification failed on, so a report can say "matches divisor='include_pad'".

Forward screening: one call of the forward on an input whose values are distinct
integers (no max-pooling ties, every window sum distinct in general) rules out most
candidates by output shape or value; survivors (or, without a forward, every
candidate) go through :func:`symjac.verify`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError, SymjacError
from symjac._exact import ExactArray
from symjac.check._rounding import precision, unit_roundoff
from symjac.pool._geometry import Geometry, check_shape, resolved
from symjac.pool._jacobian import exact_forward
from symjac.pool._ops import operator_of
from symjac.pool._spec import AdaptivePool, FractionalMaxPool, GlobalPool, Pool, PoolSpec
from symjac.verifiers.pool._inputs import EDGES, families
from symjac.verifiers.pool._run import run

#: Neighbouring values of each convention field, in the order they are tried.
PADDING_NEIGHBOURS = ("same", "same_lower")
DIVISORS = ("exclude_pad", "include_pad")
LAYOUTS = ("channels_first", "channels_last")


@dataclasses.dataclass(frozen=True)
class Match:
    """A spec the implementation matches exactly.

    Attributes:
      spec: the spec.
      tie: max pooling with a backward: the tie policy seen (``"first"``, ``"last"``,
        ``"split"`` or ``"other"``, any element of the Clarke set); else None.
      checked: ``"forward and backward"``, ``"backward"`` or ``"forward"``.
    """

    spec: PoolSpec
    tie: str | None
    checked: str

    def __str__(self) -> str:
        return f"{self.spec!r}" + (f" (tie policy {self.tie!r})" if self.tie else "")


@dataclasses.dataclass(frozen=True)
class Inference:
    """What :func:`infer` found.

    Attributes:
      matches: every spec matched exactly (empty when none).
      closest: when nothing matched, the nearest candidate; else None.
      difference: where the closest candidate differs (a sentence), else "".
      candidates: how many specs were tried.
    """

    matches: tuple[Match, ...]
    closest: PoolSpec | None
    difference: str
    candidates: int

    @property
    def specs(self) -> list[PoolSpec]:
        return [m.spec for m in self.matches]

    def __bool__(self) -> bool:
        return bool(self.matches)

    def __str__(self) -> str:
        if self.matches:
            return "matches " + "; ".join(map(str, self.matches))
        return f"none, closest: {self.closest!r} differing at {self.difference}"


def _callables(impl: Any) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """(forward, backward) from an object/namespace/dict or a (forward, backward) pair."""
    if isinstance(impl, tuple) and len(impl) == 2:
        fwd, bwd = impl
    elif isinstance(impl, dict):
        fwd, bwd = impl.get("forward"), impl.get("backward")
    else:
        fwd, bwd = getattr(impl, "forward", None), getattr(impl, "backward", None)
    if fwd is not None and not callable(fwd) or bwd is not None and not callable(bwd):
        raise InputError("impl: forward and backward must be callables on NumPy arrays (or None)")
    if fwd is None and bwd is None:
        raise InputError("impl has neither a forward nor a backward: give an object with forward(x) and/or "
                         "backward(x, dy), or a (forward, backward) pair")
    return fwd, bwd


def distinct_values(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """Globally distinct small integers in a seeded order (exact in the dtype up to its
    integer range; shapes beyond it repeat values, which only weakens the screen)."""
    n = math.prod(shape)
    limit = 2 ** precision(dtype)
    values = np.random.default_rng(seed).permutation(n) % limit
    values = values - min(n, limit) // 2
    out: np.ndarray = values.reshape(shape).astype(dtype)
    return out


def _call_forward(forward: Callable[..., Any], x: np.ndarray) -> np.ndarray | str:
    try:
        y = np.asarray(forward(x.copy()))
    except Exception as exc:  # noqa: BLE001 - the implementation's failure rules the screen out
        return f"the forward raised {type(exc).__name__}: {exc}"
    if y.dtype.kind not in "fiu" and y.dtype.name != "bfloat16":
        return f"the forward returned dtype {y.dtype}"
    return y.astype(np.float64)


def _forward_difference(g: Geometry, x: np.ndarray, y: np.ndarray | str) -> tuple[float, str]:
    """(score, sentence): 0 when the forward matches the exact forward of ``g`` (within
    the rounding of averaging in the dtype), larger the further off."""
    if isinstance(y, str):
        return 3.0, y
    if y.shape != g.output_shape:
        return 2.0, f"output shape: expected {g.output_shape}, observed {y.shape}"
    exact = exact_forward(g, ExactArray.from_any(x.astype(np.float64))).to_numpy(np.float64)
    u = unit_roundoff(x.dtype)
    tol = 4 * g.cells.shape[1] * u * np.abs(exact)
    bad = np.argwhere(np.abs(y - exact) > tol)
    if not bad.size:
        return 0.0, ""
    i = tuple(int(v) for v in bad[0])
    expected = Fraction(float(exact[i])).limit_denominator(2**20)
    return 1.0 + len(bad) / y.size, (f"forward values at {len(bad)} of {y.size} outputs, first {i}: "
                                     f"expected {expected}, observed {float(y[i]):g}")


def _tie(report: Any) -> str | None:
    policy = report.stats.get("tie_policy")
    return None if policy is None else str(policy)


def _check(spec: PoolSpec, g: Geometry, fwd: Callable[..., Any] | None, bwd: Callable[..., Any] | None,
           x: np.ndarray, y: np.ndarray | str | None, dtype: np.dtype, seed: int,
           isolate: bool = False) -> tuple[float, str, Match | None]:
    """Score one candidate: (score, difference, Match or None)."""
    if y is not None:
        score, diff = _forward_difference(g, x, y)
        if score:
            return score, diff, None
    if bwd is None and not isolate:
        return 0.0, "", Match(spec, None, "forward")
    # the conventions a spec names decide the match; the edges of the float range (NaN, ±inf, overflow) do not
    screened = tuple(f for f in families(g) if f not in EDGES)
    report = run(spec, backward=bwd, forward=fwd, x=x, dtype=dtype, seed=seed, isolate=isolate, families=screened)
    if report.ok:
        return 0.0, "", Match(spec, _tie(report) if operator_of(spec).ties else None,
                              "forward and backward" if fwd else "backward")
    if not report.findings:  # unsupported in this dtype: no match, nothing to rank by
        return 1.0, str(report.unsupported), None
    first = report.findings[0]
    return 0.5 + 0.1 * len(report.categories()), f"{first.category}: {first.message}", None


def _screen(candidates: Iterable[PoolSpec], impl: Any, input_shape: tuple[int, ...], dtype: Any,
            seed: int, isolate: bool = False) -> Inference:
    fwd, bwd = _callables(impl)
    dt = np.dtype(dtype)
    x = distinct_values(tuple(input_shape), dt, seed)
    # isolated: no direct call here (it could kill this process); verify screens instead
    y = _call_forward(fwd, x) if fwd is not None and not isolate else None
    matches: list[Match] = []
    best: tuple[float, str, PoolSpec | None] = (math.inf, "no candidate fits the input shape", None)
    tried = 0
    for spec in dict.fromkeys(candidates):
        try:
            g = resolved(spec, check_shape(input_shape))
        except SpecError:
            continue
        tried += 1
        score, diff, match = _check(spec, g, fwd, bwd, x, y, dt, seed, isolate)
        if match is not None:
            matches.append(match)
        elif score < best[0]:
            best = (score, diff, spec)
    if matches:
        return Inference(tuple(matches), None, "", tried)
    return Inference((), best[2], best[1], tried)


def _pool_candidates(mode: str, kernel: Any, stride: Any, padding: Any, dilation: Any) -> list[Pool]:
    paddings = [padding] + [p for p in PADDING_NEIGHBOURS if p != padding and padding != "valid"]
    out = []
    for pad, ceil, divisor, layout in itertools.product(paddings, (False, True), DIVISORS, LAYOUTS):
        if divisor not in operator_of(mode).infer_divisors(DIVISORS):
            continue
        if ceil and isinstance(pad, str) and pad != "valid":
            continue
        try:
            out.append(Pool(mode, kernel, stride=stride, padding=pad, dilation=dilation, ceil_mode=ceil,
                            divisor=divisor, layout=layout))
        except SpecError:
            continue
    return out


def infer(impl: Any, *, kernel: Any, input_shape: tuple[int, ...], mode: str | None = None, stride: Any = None,
          padding: Any = "valid", dilation: Any = 1, dtype: Any = "float64", seed: int = 0) -> Inference:
    """Every pooling spec near the given arguments that ``impl`` computes exactly.

    Candidates: ``mode`` (both when None) × padding (as given, and SAME upper/lower
    when it is not ``"valid"``) × ``ceil_mode`` × divisor (average pooling) × layout.
    A candidate matches when the forward equals its exact forward and the backward
    passes :func:`symjac.verify` (any Clarke element at ties; the tie policy seen is
    in each :class:`Match`).

    Args:
      impl: an object, namespace or dict with ``forward(x)`` and/or
        ``backward(x, dy)``, or a ``(forward, backward)`` pair (either may be None).
      kernel, stride, padding, dilation: as for :class:`symjac.Pool`.
      input_shape: the full input shape the implementation is called with.
      mode: ``"max"``, ``"avg"`` or None (try both).
      dtype: the float dtype of the calls.
      seed: seeds the inputs.

    Returns:
      An :class:`Inference`; ``str()`` of it reads "matches Pool(...)" or
      "none, closest: Pool(...) differing at ...".

    Raises:
      SpecError / InputError: the arguments describe no spec, or impl has no callables.

    Examples:
      >>> import torch, symjac
      >>> f = lambda x: torch.nn.functional.avg_pool2d(torch.from_numpy(x), 3, 1, 1).numpy()
      >>> print(symjac.infer((f, None), mode="avg", kernel=3, stride=1, padding=1, input_shape=(1, 1, 5, 5)))
      matches Pool(mode='avg', ..., divisor='include_pad', layout='channels_first')
    """
    modes = ("max", "avg") if mode is None else (mode,)
    candidates = [c for m in modes for c in _pool_candidates(m, kernel, stride, padding, dilation)]
    if not candidates:
        Pool(modes[0], kernel, stride=stride, padding=padding, dilation=dilation)  # raises the SpecError
    return _screen(candidates, impl, tuple(input_shape), dtype, seed)


def neighbours(spec: PoolSpec) -> list[tuple[PoolSpec, str]]:
    """Specs one convention away from ``spec``, each with the changed field as text."""
    op = operator_of(spec)
    if not isinstance(spec, (Pool, AdaptivePool, GlobalPool)):  # RoI and fractional pooling: their own conventions
        changes: list[dict[str, Any]] = op.neighbour_changes(spec, DIVISORS)
        if isinstance(spec, FractionalMaxPool):  # (the samples' axis order, overlapping) and its layout
            changes = [{"layout": "channels_last" if spec.layout == "channels_first" else "channels_first"}] + changes
        return [(dataclasses.replace(spec, **change), ", ".join(f"{k}={v!r}" for k, v in change.items()))
                for change in changes]
    if not isinstance(spec, Pool):
        other = "channels_last" if spec.layout == "channels_first" else "channels_first"
        return [(dataclasses.replace(spec, layout=other), f"layout={other!r}")]
    changes = [{"divisor": d} for d in op.infer_divisors(DIVISORS) if d != spec.divisor]
    if isinstance(spec.padding, str) and spec.padding != "valid":
        changes += [{"padding": p} for p in PADDING_NEIGHBOURS if p != spec.padding]
    if not isinstance(spec.padding, str) or spec.padding == "valid":
        changes.append({"ceil_mode": not spec.ceil_mode})
    changes += [{"layout": lay} for lay in LAYOUTS if lay != spec.layout]
    changes += op.neighbour_changes(spec, DIVISORS)
    out: list[tuple[PoolSpec, str]] = []
    for change in changes:
        try:
            out.append((dataclasses.replace(spec, **change),
                        ", ".join(f"{k}={v!r}" for k, v in change.items())))
        except SpecError:
            continue
    return out


def _same_windows(g: Geometry, spec: PoolSpec) -> bool:
    """Whether ``spec`` at ``g``'s input shape has ``g``'s windows, divisors and layout."""
    try:
        other = resolved(spec, g.input_shape)
    except SpecError:
        return False
    if not g.axes:  # a table geometry (RoI pooling): the same cells and weights
        return bool(np.array_equal(g.cells, other.cells) and np.array_equal(np.asarray(g.table.num),  # type: ignore[attr-defined]
                                                                          np.asarray(other.table.num)))  # type: ignore[attr-defined]
    return (other.spec.layout == g.spec.layout and other.out_spatial == g.out_spatial
            and all(np.array_equal(a.cells, b.cells) and np.array_equal(a.valid, b.valid) for a, b in zip(g.axes, other.axes))
            and np.array_equal(other.divisor, g.divisor)
            and getattr(other.spec, "pad_value", None) == getattr(g.spec, "pad_value", None))


def hint(spec: PoolSpec, forward: Callable[..., Any] | None, backward: Callable[..., Any] | None,
         input_shape: tuple[int, ...], dtype: Any = "float64", seed: int = 0, isolate: bool = False) -> str | None:
    """A sentence naming the neighbouring conventions ``forward``/``backward`` match
    exactly ("forward and backward match divisor='include_pad' exactly"), or None.

    A neighbour with the same windows, divisors and layout at this shape (include_pad
    without padding, ceil_mode where no window overhangs) explains nothing: the
    implementation "matching" it at the screen's inputs only says the failure depends
    on the inputs. Such neighbours are skipped.
    """
    found = []
    here = resolved(spec, tuple(input_shape))
    for candidate, change in neighbours(spec):
        if _same_windows(here, candidate):
            continue
        try:
            result = _screen([candidate], (forward, backward), input_shape, dtype, seed, isolate)
        except SymjacError:
            continue
        if result.matches:
            found.append((result.matches[0].checked, change))
    if not found:
        return None
    subject = {"forward": "the forward matches", "backward": "the backward matches"}.get(found[0][0], "forward and "
                                                                                         "backward match")
    return f"{subject} {' and also '.join(c for _, c in found)} exactly"
