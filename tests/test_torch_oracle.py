"""PyTorch as an independent oracle for symjac's pooling forward, VJP and lowering.

Every expected number here comes from PyTorch 2.13 (CPU, float64) or from a hand
derivation in a comment, never from symjac. The configurations are generated
deterministically (``random.Random(seed)``) and each test loops over many of them,
collecting every failing configuration into one readable assertion message.

Floating-point bounds (used for average pooling, and for the even split of
``torch.amax``). With unit roundoff u and gamma_n = n*u / (1 - n*u) (Higham,
*Accuracy and Stability of Numerical Algorithms*, Lemma 3.1: a product of n factors
(1 + delta_i)^(+-1), |delta_i| <= u, is 1 + theta_n with |theta_n| <= gamma_n):

* forward of a window with K cells and divisor D, computed either as
  fl(fl(sum x_i) / D) or as sum_i fl(x_i * fl(1/D)) (any summation order): every term
  x_i/D passes through at most K - 1 additions plus 2 roundings (reciprocal and
  multiply; a direct division is 1), so
  |computed - exact| <= gamma_{K+1} * sum_i |x_i| / D <= gamma_{K+2} * sum |terms|.
  We use n = K + 2 (one spare rounding).
* VJP at a cell that m windows read: dx_j = sum_w dy_w * J_wj, each term one division
  or reciprocal+multiply (<= 2 roundings) and m - 1 additions: n = m + 2, with
  sum |terms| = sum_w |dy_w| * |J_wj|.
* sum |terms| itself is obtained from PyTorch: the forward at |x| (average pooling is
  linear with non-negative weights) and the backward with |dy| at the same x (same
  routing). That float is within a factor (1 +- gamma_n) of the true sum, so
  S_true <= S_computed / (1 - gamma_n); the bound used is gamma_n * S_computed / (1 - gamma_n).
* symjac's lowering and PyTorch are each within that bound of the exact value, so
  they are within twice it of each other (triangle inequality).

Max pooling moves values without arithmetic; dy is dyadic (multiples of 1/8, |dy| <= 2)
and at most 64 windows read one cell, so every sum is exact in float64: max pooling
must agree exactly.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import time
from fractions import Fraction

import numpy as np
import pytest

import symjac

torch = pytest.importorskip("torch")
F = torch.nn.functional

U64 = Fraction(1, 2**53)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


MAX_REPORTED = 40


def gamma(n: int, u: Fraction = U64) -> Fraction:
    return n * u / (1 - n * u)


# ----------------------------------------------------------------------------- data
def distinct_values(rng: random.Random, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct dyadic values (a permutation of 0..n-1, times 1/4, shifted): no ties."""
    n = math.prod(shape)
    perm = list(range(n))
    rng.shuffle(perm)
    offset = (n // 2) * 0.25
    return (np.array(perm, dtype=np.float64) * 0.25 - offset).reshape(shape)


def tie_values(rng: random.Random, shape: tuple[int, ...]) -> np.ndarray:
    """Values from a three-element set: windows tie often."""
    n = math.prod(shape)
    return np.array([rng.choice((-0.5, 0.0, 0.5)) for _ in range(n)], dtype=np.float64).reshape(shape)


def dyadic_dy(rng: random.Random, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    return np.array([rng.choice((-1, 1)) * rng.randint(1, 16) / 8 for _ in range(n)], dtype=np.float64).reshape(shape)


def frac(v: object) -> Fraction:
    """Exact Fraction of a SymPy Rational or a float."""
    if isinstance(v, (float, np.floating)):
        return Fraction(float(v))
    return Fraction(int(v.p), int(v.q))  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- layout
def symjac_shape(batch: str, layout: str, n: int, c: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
    """symjac's input shape: (N, C, *sp) / (N, *sp, C), unbatched (C, *sp) / (*sp, C), or (*sp)."""
    if batch == "none":
        return spatial
    if batch == "C":
        return (c, *spatial) if layout == "channels_first" else (*spatial, c)
    return (n, c, *spatial) if layout == "channels_first" else (n, *spatial, c)


def to_torch_ncs(t, batch: str, layout: str, rank: int):
    """A tensor in symjac's layout -> PyTorch's (N, C, *spatial) (a view; differentiable)."""
    if batch == "none":
        return t[None, None]
    if batch == "C":
        t = t[None]
    if layout == "channels_last":
        # (N, *sp, C) -> (N, C, *sp): for 2-D/3-D this is exactly PyTorch's
        # channels_last / channels_last_3d memory format, so its NHWC kernels run.
        t = t.permute(0, rank + 1, *range(1, rank + 1))
    return t


def from_torch_ncs(t, batch: str, layout: str, rank: int):
    """Inverse of :func:`to_torch_ncs`."""
    if batch == "none":
        return t[0, 0]
    if layout == "channels_last":
        t = t.permute(0, *range(2, rank + 2), 1)
    if batch == "C":
        t = t[0]
    return t


# ------------------------------------------------------------------------------ case
class Case:
    """One configuration: a symjac spec, a PyTorch function, input kind and bounds.

    Attributes:
      label: readable description for failure messages.
      spec: the symjac spec.
      torch_fn: (N, C, *sp) tensor -> (N, C, *out) tensor, PyTorch's operator.
      shape: symjac's input shape.
      batch, layout, rank: how to move between symjac's layout and PyTorch's.
      ties: tie-rich input (compare only tie=`tie`, which must be PyTorch's rule).
      tie: symjac tie policy PyTorch's backward implements here.
      exact_fwd / exact_bwd: whether the result must agree exactly (max routing).
      n_fwd / n_bwd: rounding counts n for gamma_n (see the module docstring).
    """

    def __init__(self, label, spec, torch_fn, shape, batch, layout, rank, *, ties=False, tie="first",
                 exact_fwd, exact_bwd, n_fwd=0, n_bwd=0):
        self.label, self.spec, self.torch_fn, self.shape = label, spec, torch_fn, shape
        self.batch, self.layout, self.rank = batch, layout, rank
        self.ties, self.tie = ties, tie
        self.exact_fwd, self.exact_bwd, self.n_fwd, self.n_bwd = exact_fwd, exact_bwd, n_fwd, n_bwd


class TorchRejects(Exception):
    pass


def run_torch(case: Case, x: np.ndarray, dy_fn):
    """PyTorch forward and backward in symjac's layout; also the sum-|terms| arrays."""
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    try:
        y = from_torch_ncs(case.torch_fn(to_torch_ncs(xt, case.batch, case.layout, case.rank)),
                           case.batch, case.layout, case.rank)
    except RuntimeError as e:  # PyTorch refuses the configuration
        raise TorchRejects(str(e)) from None
    dy = dy_fn(tuple(y.shape))
    y.backward(torch.from_numpy(dy))
    y_np, dx_np = y.detach().numpy().copy(), xt.grad.numpy().copy()
    s_fwd = s_bwd = None
    if not case.exact_fwd:
        xa = torch.from_numpy(np.abs(x))
        s_fwd = from_torch_ncs(case.torch_fn(to_torch_ncs(xa, case.batch, case.layout, case.rank)),
                               case.batch, case.layout, case.rank).numpy().copy()
    if not case.exact_bwd:
        # Same x (same routing for max/amax), |dy|: every term of dx_j is >= 0.
        xb = torch.from_numpy(x.copy()).requires_grad_(True)
        yb = from_torch_ncs(case.torch_fn(to_torch_ncs(xb, case.batch, case.layout, case.rank)),
                            case.batch, case.layout, case.rank)
        yb.backward(torch.from_numpy(np.abs(dy)))
        s_bwd = xb.grad.numpy().copy()
    return y_np, dx_np, dy, s_fwd, s_bwd


def compare(what: str, got: np.ndarray, want: np.ndarray, exact: bool, n: int, s: np.ndarray | None,
            factor: int = 1) -> list[str]:
    """got (floats) vs want (exact SymPy values, or floats): exact, or within factor * bound."""
    if got.shape != want.shape:
        return [f"{what}: shape {got.shape} != expected {want.shape}"]
    out = []
    g = gamma(n) if not exact else Fraction(0)
    for idx in np.ndindex(*got.shape):
        w = frac(want[idx])
        v = Fraction(float(got[idx]))
        if exact:
            if v != w:
                out.append(f"{what}{list(idx)}: {float(v)!r} != {float(w)!r}")
        else:
            bound = factor * g * Fraction(float(s[idx])) / (1 - g)  # type: ignore[index]
            if abs(v - w) > bound:
                out.append(f"{what}{list(idx)}: {float(v)!r} vs {float(w)!r}, "
                           f"|diff| {float(abs(v - w)):.3g} > {float(bound):.3g}")
        if len(out) >= 3:
            break
    return out


def check_case(case: Case, rng: random.Random, stats: dict) -> list[str]:
    """Run one case; return failure strings (empty: pass). Updates ``stats``."""
    x = (tie_values if case.ties else distinct_values)(rng, case.shape)
    try:
        y_t, dx_t, dy, s_fwd, s_bwd = run_torch(case, x, lambda shape: dyadic_dy(rng, shape))
    except TorchRejects as e:
        try:
            symjac.resolve(case.spec, case.shape)
        except symjac.SpecError:
            stats["both_reject"] += 1
            return []
        return [f"{case.label}: PyTorch rejects ({e}) but symjac accepts"]
    try:
        y_s = symjac.forward(case.spec, x)
    except symjac.SpecError as e:
        if np.isneginf(y_t).any():
            # PyTorch max pooling outputs -inf (and a zero gradient) for a window that
            # reads only padding (possible with dilation); symjac rejects it by design.
            stats["all_pad_rejected"] += 1
            return []
        return [f"{case.label}: symjac raises SpecError ({e}) but PyTorch computes it"]
    fails: list[str] = []
    dx_s = symjac.vjp(case.spec, x, dy, tie=case.tie)
    low = symjac.lower(case.spec, case.shape)
    y_l = low.forward(x)
    dx_l = low.vjp(x, dy, tie=case.tie)
    if y_l.dtype != np.float64 or dx_l.dtype != np.float64:
        fails.append(f"lowering dtype {y_l.dtype}/{dx_l.dtype}, expected float64")
    fails += compare("forward", y_t, y_s, case.exact_fwd, case.n_fwd, s_fwd)
    fails += compare("vjp", dx_t, dx_s, case.exact_bwd, case.n_bwd, s_bwd)
    fails += compare("lower.forward", y_l, y_t, case.exact_fwd, case.n_fwd, s_fwd, factor=2)
    fails += compare("lower.vjp", dx_l, dx_t, case.exact_bwd, case.n_bwd, s_bwd, factor=2)
    stats["checked"] += 1
    return [f"{case.label}: {f}" for f in fails]


def run_cases(cases: list[Case], seed: int) -> dict:
    rng = random.Random(seed)
    stats = {"checked": 0, "both_reject": 0, "all_pad_rejected": 0}
    failures: list[str] = []
    for case in cases:
        try:
            failures += check_case(case, rng, stats)
        except Exception as e:  # noqa: BLE001 -- a crash is a finding for this config, not the end of the sweep
            failures.append(f"{case.label}: {type(e).__name__}: {e}")
    stats["failures"] = failures
    return stats


def assert_no_failures(stats: dict) -> None:
    failures = stats["failures"]
    if failures:
        shown = "\n  ".join(failures[:MAX_REPORTED])
        more = f"\n  ... and {len(failures) - MAX_REPORTED} more" if len(failures) > MAX_REPORTED else ""
        pytest.fail(f"{len(failures)} failing configurations:\n  {shown}{more}", pytrace=False)


# ---------------------------------------------------------------- config generation
MAX_SPATIAL = {1: 10, 2: 7, 3: 4}
# symjac builds and differentiates SymPy's Max over every cell of a window; that costs
# ~0.7 s at 12 cells, ~20 s at 32 and ~190 s at 64 (a 4x4x4 GlobalPool). Max windows
# here stay at <= 12 cells so the file runs in well under a minute.
MAX_MAX_CELLS = 12
TORCH_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
TORCH_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
TORCH_AMAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
TORCH_AAVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def pick_batch(rng: random.Random) -> tuple[str, int, int]:
    batch = rng.choices(("NC", "C", "none"), weights=(8, 1, 1))[0]
    return batch, rng.choice((1, 2)), rng.choice((1, 2))


def torch_axis_reads_input(L: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> bool:
    """Whether every window along one axis reads a cell of [0, L), with PyTorch's output size:
    out = floor((L + 2p - d(k-1) - 1 [+ s - 1 if ceil]) / s) + 1, minus the last window
    if ceil_mode made it start at or beyond L + p (pooling_output_shape in ATen)."""
    num = L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    return all(any(0 <= o * s - p + j * d < L for j in range(k)) for o in range(out))


def pool_cases(seed: int, count: int, *, ties: bool, relation_counts: dict | None = None,
               all_pad: list | None = None) -> list[Case]:
    """Random Pool configurations that PyTorch accepts (pad <= kernel/2, fitting kernels)."""
    rng = random.Random(seed)
    cases: list[Case] = []
    while len(cases) < count:
        rank = rng.choices((1, 2, 3), weights=(3, 5, 2))[0]
        mode = "max" if ties else rng.choice(("max", "avg"))
        kernel, stride, dilation, pad, spatial, rels = [], [], [], [], [], []
        for _ in range(rank):
            k = rng.randint(1, 4 if rank < 3 else 3)
            # stride relative to kernel: <, = or > (k = 1 cannot have s < k)
            rel = rng.choice(("lt", "eq", "gt") if k > 1 else ("eq", "gt"))
            s = rng.randint(1, k - 1) if rel == "lt" else k if rel == "eq" else rng.randint(k + 1, k + 2)
            d = rng.choice((1, 1, 2, 3)) if mode == "max" else 1  # torch avg_pool has no dilation
            p = rng.randint(0, k // 2)  # PyTorch: pad <= kernel_size / 2
            extent = d * (k - 1) + 1
            lo_len = max(1, extent - 2 * p)  # the window must fit the padded input
            if mode == "avg" and rank == 3:
                lo_len = max(lo_len, k)  # PyTorch avg_pool3d: "input image smaller than kernel size"
            if lo_len > MAX_SPATIAL[rank]:
                break
            kernel.append(k)
            stride.append(s)
            dilation.append(d)
            pad.append(p)
            rels.append(rel)
            spatial.append(rng.randint(lo_len, MAX_SPATIAL[rank]))
        if len(kernel) != rank or (mode == "max" and math.prod(kernel) > MAX_MAX_CELLS):
            continue
        ceil_mode = rng.random() < 0.5
        layout = rng.choice(("channels_first", "channels_last"))
        batch, n, c = pick_batch(rng)
        default_stride = rng.random() < 0.1
        if default_stride:
            stride = list(kernel)
            rels = ["eq"] * rank
        padding = pad[0] if len(set(pad)) == 1 and rng.random() < 0.5 else tuple(pad)
        divisor: str | int = "exclude_pad"
        if mode == "avg":
            divisor = rng.choice(("exclude_pad", "include_pad", "int") if rank > 1 else ("exclude_pad", "include_pad"))
            if divisor == "int":
                divisor = rng.randint(1, 7)
        kw: dict = {"padding": padding, "ceil_mode": ceil_mode, "layout": layout}
        if not default_stride:
            kw["stride"] = tuple(stride)
        if mode == "max":
            kw["dilation"] = tuple(dilation)
        else:
            kw["divisor"] = divisor
        spec = symjac.Pool(mode, tuple(kernel), **kw)
        k_, s_, p_, d_ = tuple(kernel), (None if default_stride else tuple(stride)), tuple(pad), tuple(dilation)
        if mode == "max":
            fn = functools.partial(TORCH_MAX[rank], kernel_size=k_, stride=s_, padding=p_, dilation=d_,
                                   ceil_mode=ceil_mode)
            n_fwd = n_bwd = 0
        else:
            cip = divisor == "include_pad"
            override = divisor if isinstance(divisor, int) else None
            fn = functools.partial(TORCH_AVG[rank], kernel_size=k_, stride=s_, padding=p_, ceil_mode=ceil_mode,
                                   count_include_pad=cip)
            if override is not None:  # 2-D and 3-D only: avg_pool1d has no divisor_override
                fn = functools.partial(fn, divisor_override=override)
            n_fwd = math.prod(kernel) + 2
            # A cell c is read by window w iff start_w <= c < start_w + k: start_w lies in
            # (c - k, c], k consecutive integers holding at most ceil(k/s) multiples of s.
            n_bwd = math.prod(-(-k // s) for k, s in zip(kernel, stride)) + 2
        shape = symjac_shape(batch, layout, n, c, tuple(spatial))
        if not all(torch_axis_reads_input(*a, ceil_mode) for a in zip(spatial, kernel, stride, pad, dilation)):
            # A window of padding only (dilation): PyTorch 2.13 CPU outputs -inf and its
            # max_pool backward then corrupts the heap ("double free or corruption",
            # e.g. max_pool2d(x[1,1,5,1], 2, 1, 1, (1, 2), ceil_mode=True).sum().backward()).
            # Never run PyTorch on it; symjac rejects the shape by design.
            with pytest.raises(symjac.SpecError):
                symjac.resolve(spec, shape)
            if all_pad is not None:
                all_pad.append(spec)
            continue
        label = (f"Pool({mode!r}, {tuple(kernel)}, stride={s_}, padding={padding}, dilation={d_}, "
                 f"ceil_mode={ceil_mode}, divisor={divisor!r}, layout={layout!r}) shape={shape}"
                 + (" [ties]" if ties else ""))
        cases.append(Case(label, spec, fn, shape, batch, layout, rank, ties=ties,
                          exact_fwd=mode == "max", exact_bwd=mode == "max", n_fwd=n_fwd, n_bwd=n_bwd))
        if relation_counts is not None:
            for rel in rels:
                relation_counts[rel] += 1
    return cases


def adaptive_cases(seed: int, count: int, *, ties: bool) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        rank = rng.choice((1, 2, 3))
        mode = "max" if ties else rng.choice(("max", "avg"))
        spatial = tuple(rng.randint(1, MAX_SPATIAL[rank]) for _ in range(rank))
        out = tuple(rng.randint(1, L) for L in spatial)  # downsampling (upsampling: test_adaptive_upsampling.py)
        if mode == "max" and math.prod(-(-L // o) + 1 for L, o in zip(spatial, out)) > MAX_MAX_CELLS:
            continue
        layout = rng.choice(("channels_first", "channels_last"))
        batch, n, c = pick_batch(rng)
        spec = symjac.AdaptivePool(mode, out, layout=layout)
        table = TORCH_AMAX if mode == "max" else TORCH_AAVG
        fn = functools.partial(table[rank], output_size=out)
        # Adaptive windows along an axis have at most ceil(L/o) + 1 cells, and (L >= o)
        # a cell lies in at most 2 of them: window i + 2 starts at
        # floor((i+2)L/o) >= floor((i+1)L/o + 1) >= ceil((i+1)L/o), where window i ends.
        n_fwd = math.prod(-(-L // o) + 1 for L, o in zip(spatial, out)) + 2
        n_bwd = 2**rank + 2
        shape = symjac_shape(batch, layout, n, c, spatial)
        label = f"AdaptivePool({mode!r}, {out}, layout={layout!r}) shape={shape}" + (" [ties]" if ties else "")
        cases.append(Case(label, spec, fn, shape, batch, layout, rank, ties=ties,
                          exact_fwd=mode == "max", exact_bwd=mode == "max", n_fwd=n_fwd, n_bwd=n_bwd))
    return cases


def global_cases(seed: int) -> list[Case]:
    """GlobalPool against adaptive pooling with output 1, and against mean / amax."""
    rng = random.Random(seed)
    cases = []
    for rank, mode, layout, oracle, ties in itertools.product(
        (1, 2, 3), ("max", "avg"), ("channels_first", "channels_last"), ("adaptive", "reduce"), (False, True)
    ):
        if mode == "avg" and ties:
            continue
        made = 0
        while made < 3:
            spatial = tuple(rng.randint(1, MAX_SPATIAL[rank]) for _ in range(rank))
            if mode == "max" and math.prod(spatial) > MAX_MAX_CELLS:
                continue
            made += 1
            batch, n, c = pick_batch(rng)
            dims = tuple(range(2, rank + 2))
            tie = "first"
            if oracle == "adaptive":
                table = TORCH_AMAX if mode == "max" else TORCH_AAVG
                fn = functools.partial(table[rank], output_size=(1,) * rank)
            elif mode == "avg":
                fn = functools.partial(torch.mean, dim=dims, keepdim=True)
            else:
                # torch.amax's backward splits the gradient evenly over tied maxima:
                # symjac's tie="split" (1/|I| each); one division per term.
                fn = functools.partial(torch.amax, dim=dims, keepdim=True)
                tie = "split"
            exact_bwd = mode == "max" and tie == "first"
            shape = symjac_shape(batch, layout, n, c, spatial)
            label = f"GlobalPool({mode!r}, rank={rank}, layout={layout!r}) vs {oracle} shape={shape}" + (
                " [ties]" if ties else "")
            cases.append(Case(label, symjac.GlobalPool(mode, rank=rank, layout=layout), fn, shape, batch, layout,
                              rank, ties=ties, tie=tie, exact_fwd=mode == "max", exact_bwd=exact_bwd,
                              n_fwd=math.prod(spatial) + 2, n_bwd=3))
    return cases


# ---------------------------------------------------------------------------- tests
def test_torch_max_pool_routes_ties_to_first_row_major_max():
    """The claim the tie cases rely on, checked against hand-made inputs on CPU.

    Expected gradients are hand-derived: with every cell equal, the single window of a
    kernel covering the whole input routes dy to its first cell in row-major order.
    """
    for rank, cl in itertools.product((1, 2, 3), (False, True)):
        x = torch.ones((1, 2) + (3,) * rank, dtype=torch.float64)
        if cl and rank == 2:
            x = x.contiguous(memory_format=torch.channels_last)
        if cl and rank == 3:
            x = x.contiguous(memory_format=torch.channels_last_3d)
        x.requires_grad_(True)
        TORCH_MAX[rank](x, 3).sum().backward()
        want = torch.zeros_like(x)
        want[(0, slice(None)) + (0,) * rank] = 1
        assert torch.equal(x.grad, want), (rank, cl)
    # 2-D: window [[1, 2], [2, 0]]: the tied 2s at (0,1) and (1,0): (0,1) is first row-major.
    x = torch.tensor([[[[1.0, 2.0], [2.0, 0.0]]]], dtype=torch.float64, requires_grad=True)
    F.max_pool2d(x, 2).sum().backward()
    assert x.grad.tolist() == [[[[0.0, 1.0], [0.0, 0.0]]]]
    # Adaptive max: same rule; torch.amax: split evenly (1/3 each of three tied 3s).
    x = torch.tensor([[[3.0, 1.0, 3.0, 2.0, 3.0]]], dtype=torch.float64, requires_grad=True)
    F.adaptive_max_pool1d(x, 1).sum().backward()
    assert x.grad.tolist() == [[[1.0, 0.0, 0.0, 0.0, 0.0]]]
    x.grad = None
    x.amax(-1).sum().backward()
    assert x.grad.tolist() == [[[1 / 3, 0.0, 1 / 3, 0.0, 1 / 3]]]


def test_pool_matches_torch():
    """>= 1000 Pool configurations (plus tie-rich max ones) against PyTorch float64."""
    t0 = time.perf_counter()
    relations = {"lt": 0, "eq": 0, "gt": 0}
    all_pad: list = []
    cases = pool_cases(1, 1000, ties=False, relation_counts=relations, all_pad=all_pad)
    cases += pool_cases(2, 150, ties=True, all_pad=all_pad)
    stats = run_cases(cases, seed=11)
    assert_no_failures(stats)
    checked = stats["checked"]
    # Coverage of the sweep itself (not of symjac): every rank, mode, layout and stride relation.
    assert checked >= 1000, stats
    assert min(relations.values()) >= 100, relations
    for pred in (lambda c: c.rank == 1, lambda c: c.rank == 2, lambda c: c.rank == 3,
                 lambda c: c.spec.mode == "avg" and c.spec.divisor == "include_pad",
                 lambda c: c.spec.mode == "avg" and isinstance(c.spec.divisor, int),
                 lambda c: c.spec.ceil_mode, lambda c: c.layout == "channels_last",
                 lambda c: max(c.spec.dilation) > 1):
        assert sum(map(pred, cases)) >= 40
    print(f"\npool: {checked} configs checked; {len(all_pad)} with an all-padding window (symjac: SpecError, "
          f"PyTorch not run); {stats['both_reject']} rejected by both; {time.perf_counter() - t0:.1f}s")


def test_adaptive_and_global_pool_match_torch():
    t0 = time.perf_counter()
    cases = adaptive_cases(3, 160, ties=False) + adaptive_cases(4, 60, ties=True) + global_cases(5)
    stats = run_cases(cases, seed=12)
    assert_no_failures(stats)
    assert stats["checked"] == len(cases) >= 250, stats
    print(f"\nadaptive/global: {stats['checked']} configs checked; {time.perf_counter() - t0:.1f}s")


def test_adaptive_output_larger_than_input_matches_torch():
    """PyTorch accepts output_size > L (windows repeat cells, e.g. L=2, o=3: [0,1), [0,2), [1,2)), and
    so does symjac (issue 34; tests/test_adaptive_upsampling.py checks forward and backward)."""
    t = torch.arange(2.0, dtype=torch.float64).reshape(1, 1, 2)
    assert F.adaptive_avg_pool1d(t, 3).flatten().tolist() == [0.0, 0.5, 1.0]
    y = symjac.forward(symjac.AdaptivePool("avg", (3,)), t.numpy())
    assert np.asarray(y, dtype=float).flatten().tolist() == [0.0, 0.5, 1.0]


# --------------------------------------------------------------------- SAME padding
def same_pads(L: int, k: int, s: int, d: int, lower: bool) -> tuple[int, int]:
    """DESIGN.md: out = ceil(L/s), total = max((out-1)s + (k-1)d + 1 - L, 0), low = total//2
    (SAME_UPPER, the extra cell high) or total - total//2 (SAME_LOWER, the extra cell low)."""
    out = -(-L // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - L, 0)
    small, large = total // 2, total - total // 2
    return (large, small) if lower else (small, large)


# Hand-derived (L, k, s, d) -> (SAME_UPPER pads, SAME_LOWER pads, out):
#   L=5, k=2, s=2:      out = ceil(5/2) = 3, total = 2*2 + 2 - 5 = 1       -> (0,1), (1,0)
#   L=4, k=3, s=1:      out = 4, total = 3 + 3 - 4 = 2                     -> (1,1), (1,1)
#   L=6, k=4, s=2:      out = 3, total = 4 + 4 - 6 = 2                     -> (1,1), (1,1)
#   L=5, k=2, s=3:      out = 2, total = 3 + 2 - 5 = 0                     -> (0,0), (0,0)
#   L=1, k=4, s=1:      out = 1, total = 0 + 4 - 1 = 3                     -> (1,2), (2,1)
#   L=5, k=3, s=2, d=2: out = 3, extent 5, total = 4 + 5 - 5 = 4           -> (2,2), (2,2)
#   L=6, k=2, s=1, d=3: out = 6, extent 4, total = 5 + 4 - 6 = 3           -> (1,2), (2,1)
#   L=7, k=4, s=3:      out = 3, total = 6 + 4 - 7 = 3                     -> (1,2), (2,1)
SAME_HAND = [
    (5, 2, 2, 1, (0, 1), (1, 0), 3),
    (4, 3, 1, 1, (1, 1), (1, 1), 4),
    (6, 4, 2, 1, (1, 1), (1, 1), 3),
    (5, 2, 3, 1, (0, 0), (0, 0), 2),
    (1, 4, 1, 1, (1, 2), (2, 1), 1),
    (5, 3, 2, 2, (2, 2), (2, 2), 3),
    (6, 2, 1, 3, (1, 2), (2, 1), 6),
    (7, 4, 3, 1, (1, 2), (2, 1), 3),
]


@pytest.mark.parametrize("L,k,s,d,upper,lower,out", SAME_HAND)
def test_same_pads_hand_derived(L, k, s, d, upper, lower, out):
    assert same_pads(L, k, s, d, False) == upper and same_pads(L, k, s, d, True) == lower
    for padding, pads in (("same", upper), ("same_lower", lower)):
        g = symjac.resolve(symjac.Pool("max", (k,), stride=s, dilation=d, padding=padding), (1, 1, L))
        assert g.pads == (pads,)
        assert g.output_shape == (1, 1, out)


def test_same_hand_values():
    """x = [1, 2, 3, 4, 5], k=2, s=2. SAME_UPPER pads (0,1): windows [1,2], [3,4], [5,pad];
    SAME_LOWER pads (1,0): [pad,1], [2,3], [4,5]. By hand: avg (pad excluded) is
    [3/2, 7/2, 5] / [1, 5/2, 9/2]; max is [2, 4, 5] / [1, 3, 5]."""
    x = [1, 2, 3, 4, 5]
    want = {
        ("avg", "same"): [Fraction(3, 2), Fraction(7, 2), 5],
        ("avg", "same_lower"): [1, Fraction(5, 2), Fraction(9, 2)],
        ("max", "same"): [2, 4, 5],
        ("max", "same_lower"): [1, 3, 5],
    }
    for (mode, padding), w in want.items():
        got = symjac.forward(symjac.Pool(mode, (2,), stride=2, padding=padding), x)
        assert [frac(v) for v in got] == [Fraction(v) for v in w], (mode, padding)


def explicit_same_torch(mode: str, divisor: str, rank: int, k, s, d, pads):
    """PyTorch: F.pad explicitly (-inf for max), then pool with padding 0.

    Average pooling is a sum-pool (convolution with a ones kernel) divided by the
    number of counted cells: for exclude_pad the sum-pool of a ones mask padded with
    0; for include_pad the full kernel size (every slot is inside L + pads here).
    """
    flat_pads = tuple(p for lo_hi in reversed(pads) for p in lo_hi)  # F.pad: last dim first
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]

    def fn(t):
        if mode == "max":
            return TORCH_MAX[rank](F.pad(t, flat_pads, value=-math.inf), k, s, 0, d)
        n, c = t.shape[:2]
        flat = t.reshape(n * c, 1, *t.shape[2:])
        ones_k = torch.ones((1, 1, *k), dtype=t.dtype)
        sums = conv(F.pad(flat, flat_pads, value=0.0), ones_k, stride=s)
        if divisor == "exclude_pad":
            mask = F.pad(torch.ones_like(flat), flat_pads, value=0.0)
            count = conv(mask, ones_k, stride=s)
        else:
            count = torch.full_like(sums, math.prod(k))
        return (sums / count).reshape(n, c, *sums.shape[2:])

    return fn


def axis_windows_all_read_input(L: int, k: int, s: int, d: int, lo: int) -> bool:
    """Whether every SAME window (out = ceil(L/s)) along one axis reads a cell of [0, L)."""
    return all(any(0 <= o * s - lo + j * d < L for j in range(k)) for o in range(-(-L // s)))


def same_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        rank = rng.choices((1, 2, 3), weights=(3, 5, 2))[0]
        mode = rng.choice(("max", "avg"))
        padding = rng.choice(("same", "same_lower"))
        divisor = "exclude_pad" if mode == "max" else rng.choices(("exclude_pad", "include_pad"), weights=(3, 1))[0]
        k = tuple(rng.randint(1, 4) for _ in range(rank))  # even kernels included
        s = tuple(rng.choice((1, 2, 3)) for _ in range(rank))
        d = tuple(rng.choice((1, 2)) if mode == "max" else 1 for _ in range(rank))
        spatial = tuple(rng.randint(1, MAX_SPATIAL[rank]) for _ in range(rank))
        pads = tuple(same_pads(L, kk, ss, dd, padding == "same_lower") for L, kk, ss, dd in zip(spatial, k, s, d))
        layout = rng.choice(("channels_first", "channels_last"))
        batch, n, c = pick_batch(rng)
        shape = symjac_shape(batch, layout, n, c, spatial)
        kw: dict = {"stride": s, "padding": padding, "layout": layout}
        if mode == "max":
            kw["dilation"] = d
        else:
            kw["divisor"] = divisor
        spec = symjac.Pool(mode, k, **kw)
        axes = zip(spatial, k, s, d, pads)
        if not all(axis_windows_all_read_input(L, kk, ss, dd, lo) for L, kk, ss, dd, (lo, _) in axes):
            # With dilation SAME can make a window of padding only (L=1, k=2, d=3: pads
            # (1, 2), cells {-1, 2}); symjac rejects such shapes, checked separately.
            with pytest.raises(symjac.SpecError):
                symjac.resolve(spec, shape)
            continue
        label = (f"Pool({mode!r}, {k}, stride={s}, padding={padding!r}, dilation={d}, divisor={divisor!r}, "
                 f"layout={layout!r}) shape={shape} pads={pads}")
        n_fwd = math.prod(k) + 2
        n_bwd = math.prod(-(-kk // ss) for kk, ss in zip(k, s)) + 2
        case = Case(label, spec, explicit_same_torch(mode, divisor, rank, k, s, d, pads), shape, batch, layout,
                    rank, exact_fwd=mode == "max", exact_bwd=mode == "max", n_fwd=n_fwd, n_bwd=n_bwd)
        case.pads = pads  # type: ignore[attr-defined]
        cases.append(case)
    return cases


def test_same_padding_matches_explicit_torch_padding():
    t0 = time.perf_counter()
    cases = same_cases(6, 320)
    failures = []
    for case in cases:
        try:
            g = symjac.resolve(case.spec, case.shape)
        except symjac.SpecError:
            failures.append(f"{case.label}: symjac raises SpecError")
            continue
        if g.pads != case.pads:
            failures.append(f"{case.label}: symjac pads {g.pads} != hand formula {case.pads}")
    stats = run_cases(cases, seed=13)
    stats["failures"] = failures + stats["failures"]
    assert_no_failures(stats)
    assert stats["checked"] == len(cases)
    assert sum(any(kk % 2 == 0 for kk in c.spec.kernel) for c in cases) >= 100
    assert sum(any(ss >= 2 for ss in c.spec.stride) for c in cases) >= 100
    assert sum(c.spec.padding == "same_lower" for c in cases) >= 100
    assert sum(max(c.spec.dilation) > 1 for c in cases) >= 40
    print(f"\nSAME: {stats['checked']} configs checked; {time.perf_counter() - t0:.1f}s")
