"""softmax_ce evaluated class-generically: O(C) numbers per row, no SymPy work per class.

The explicit SymPy template (``symjac.loss._kinds.softmax_ce``: one symbol per
class) grows with C: differentiating it, its condition sums and running errors are
O(C) to O(C²) expressions, and lowering them with ``cse`` costs far more. Every
quantity the evaluator needs is, per class j, a short formula in class j's own numbers
and a few per-row sums: :func:`derivation` proves with SymPy, for every C at once, that
they are ℓ's derivatives (O(1) SymPy work, once per process); the running errors
follow the explicit forms' trees node by node (derived in the docstrings below); both
equal the explicit build's values to 1e-40 (``tests/test_softmax_classes.py``, C = 1..8).
The numbers are O(C) per row (O(rows·C) in all).

Notation per row (C classes, logits ``z_c``, labels ``t_c``, weights ``w_c``, ε):

- ``m = max_c z_c``, ``x_c = z_c - m <= 0`` (exact), ``E_c = e^{x_c}`` (``E = 1`` at
  the argmax), ``D = Σ_c E_c``, ``p_c = E_c/D`` (softmax), ``q_c = 1 - p_c = D_{-c}/D``;
- ``b_c = (1 - ε)·t_c + ε/C``, ``a_c = b_c·w_c``, ``W = Σ_c a_c``;
- ``λ = log D = log1p(D_{-top})`` and ``L = m + λ = log Σ_c e^{z_c}``, so
  ``L - z_c = λ - x_c >= 0``;
- ``X_{-j}``: the sum of ``X_c`` over the classes ``c ≠ j``, formed as a prefix plus a
  suffix sum (no subtraction; see :func:`_others`).

Then (the loss is ``ℓ = Σ_c a_c·(L - z_c)``, :class:`symjac.Loss`):

- ``ℓ = Σ_c a_c·(λ - x_c)``: a sum of terms >= 0 (with t, w >= 0 and ε in [0, 1],
  which the evaluator checks);
- ``h_j = dℓ/dz_j = W·p_j - a_j = (E_j·W_{-j} - a_j·D_{-j}) / D``: the ``c = j`` terms,
  which cancel (``softmax_j - 1`` near ``p_j = 1``), taken out before anything is
  evaluated, as the explicit stable forms did.

Sums of terms >= 0 evaluated in round-to-nearest at precision P err by at most
``(C - 1)·2^-P`` relatively (any order), so every aggregate here is as accurate as the
per-class forms were; the only subtraction, ``E_j·W_{-j} - a_j·D_{-j}``, cancels exactly
as much as the true derivative is small against ``E_j·W_{-j} + a_j·D_{-j}``, which was
the size of the per-class form's terms too.

The bounds (condition sums and running errors of the explicit SymPy forms, see
:func:`symjac.loss._templates.running_error`) are derived in :func:`_loss_condition`,
:func:`_derivative_condition`, :func:`_loss_running_error` and
:func:`_derivative_running_error`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np
import sympy

from symjac.loss import _numbers
from symjac.loss._templates import LossTemplate


@dataclasses.dataclass(frozen=True)
class _Arithmetic:
    """The functions one number type needs, on object arrays: MPFR (whole batches) or mpmath (one row)."""

    exp: Callable[[Any], Any]
    log1p: Callable[[Any], Any]
    shift: Callable[[np.ndarray, np.ndarray], np.ndarray]  # z - m, exactly


def _mpfr_shift(z: np.ndarray, top: np.ndarray) -> np.ndarray:
    with _numbers.exact_context():  # exact for any two inputs below _numbers.LIMIT
        return np.asarray(z - top, dtype=object)


_MPFR = _Arithmetic(exp=_numbers.FUNCTIONS["exp"], log1p=_numbers.FUNCTIONS["log1p"], shift=_mpfr_shift)
_MPMATH = _Arithmetic(exp=np.frompyfunc(mpmath.exp, 1, 1), log1p=np.frompyfunc(mpmath.log1p, 1, 1),
                      shift=np.frompyfunc(lambda a, b: mpmath.fsub(a, b, exact=True), 2, 1))


def _others(x: np.ndarray) -> np.ndarray:
    """Per row and class j, ``Σ_{c≠j} x_c``: the prefix sum before j plus the suffix sum
    after it (3 passes, no subtraction: for x >= 0 each is a sum of terms >= 0)."""
    zero = x[:, :1] * 0
    before = np.concatenate([zero, np.cumsum(x, axis=1)[:, :-1]], axis=1)
    after = np.concatenate([np.cumsum(x[:, ::-1], axis=1)[:, ::-1][:, 1:], zero], axis=1)
    return np.asarray(before + after, dtype=object)


def _row_sum(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.sum(x, axis=1, keepdims=True), dtype=object)


class _Rows:
    """The per-row aggregates and per-class numbers of a batch of rows (see the module docstring).

    Every array is (rows, C) or (rows, 1); ``z``, ``t``, ``w`` are the inputs, ``eps`` ε per row.
    """

    def __init__(self, z: np.ndarray, t: np.ndarray, w: np.ndarray, eps: np.ndarray, ar: _Arithmetic):
        rows, n = z.shape
        self.n, self.z, self.t, self.w, self.eps = n, z, t, w, eps
        top = np.argmax(z, axis=1)
        self.m = z[np.arange(rows), top][:, None]
        self.x = ar.shift(z, self.m)
        self.e = ar.exp(self.x)  # e^0 = 1 exactly at the argmax
        self.d = _row_sum(self.e)
        self.d_others = _others(self.e)
        self.log_d = ar.log1p(self.d_others[np.arange(rows), top])[:, None]  # λ = log D = log1p(D - 1)
        self.b = (1 - eps) * t + eps / n
        self.a = self.b * w
        self.w_total = _row_sum(self.a)
        self.w_others = _others(self.a)
        self.p = self.e / self.d
        self.q = self.d_others / self.d
        self.gap = self.log_d - self.x  # L - z_c >= 0

    def value(self) -> np.ndarray:
        """ℓ per row: ``Σ_c a_c·(λ - x_c)`` (terms >= 0)."""
        return np.asarray(_row_sum(self.a * self.gap)[:, 0], dtype=object)

    def derivative(self) -> np.ndarray:
        """``h_j = (E_j·W_{-j} - a_j·D_{-j}) / D`` per row and class."""
        return np.asarray((self.e * self.w_others - self.a * self.d_others) / self.d, dtype=object)

    @functools.cached_property
    def l_abs(self) -> np.ndarray:
        """|L|, L = m + λ = log Σ_c e^{z_c}."""
        return np.asarray(np.abs(self.m + self.log_d), dtype=object)

    @functools.cached_property
    def label_error(self) -> np.ndarray:
        """``R(b_c)``, the running error of SymPy's ``ε/C + t_c·(1 - ε)`` in units of u:
        ``E(ε/C) = 2|ε|/C`` (the constant 1/C and the product each round once) when C is
        no power of two, else 0 (exact); ``E(1 - ε) = 1 + |ε|``; ``E(t·(1 - ε)) =
        (1 + |ε|)|t| + |t||1 - ε|``; the sum adds ``|ε/C| + |t||1 - ε|``. Total
        ``(2δ_C + 1)|ε|/C + |t|·(1 + |ε| + 2|1 - ε|)``, δ_C = 1 if C is no power of two."""
        n = self.n
        dyadic = n & (n - 1) == 0
        eps = np.abs(self.eps)
        return np.asarray((1 if dyadic else 3) * eps / n + np.abs(self.t) * (1 + eps + 2 * np.abs(1 - self.eps)),
                          dtype=object)


def _loss_condition(r: _Rows, h: np.ndarray) -> np.ndarray:
    """``Σ_m |∂ℓ/∂x_m|·|x_m|`` from ``ℓ = Σ_c a_c·(L - z_c)``, ``∂a_c/∂ε = (1/C - t_c)·w_c``:

    - ``∂ℓ/∂z_c = h_c``;
    - ``∂ℓ/∂t_c = (1 - ε)·w_c·(L - z_c)``, ``∂ℓ/∂w_c = b_c·(L - z_c)``;
    - ``∂ℓ/∂ε = Σ_c (1/C - t_c)·w_c·(L - z_c)``.
    """
    n = r.n
    terms = (np.abs(h) * np.abs(r.z) + np.abs((1 - r.eps) * r.w * r.t) * r.gap + np.abs(r.a) * r.gap)
    d_eps = _row_sum((r.w / n - r.t * r.w) * r.gap)
    return np.asarray((_row_sum(terms) + np.abs(r.eps) * np.abs(d_eps))[:, 0], dtype=object)


def _derivative_condition(r: _Rows) -> np.ndarray:
    """``Σ_m |∂h_j/∂x_m|·|x_m|`` per class j, with ``h_j = W·p_j - a_j``, W >= 0:

    - ``∂h_j/∂z_k = W·p_j·(δ_jk - p_k)``: ``W·p_j·(q_j·|z_j| + Σ_{k≠j} p_k·|z_k|)``;
    - ``∂h_j/∂t_k = (1 - ε)·w_k·(p_j - δ_jk)``: ``|1 - ε|·(p_j·Σ_{k≠j} |w_k t_k| + q_j·|w_j t_j|)``;
    - ``∂h_j/∂w_k = b_k·(p_j - δ_jk)``: ``p_j·Σ_{k≠j} |a_k| + q_j·|a_j|``;
    - ``∂h_j/∂ε = p_j·Σ_k (1/C - t_k)·w_k - (1/C - t_j)·w_j``, times |ε|.
    """
    n = r.n
    pz = np.abs(r.p * r.z)
    wt = np.abs(r.w * r.t)
    aa = np.abs(r.a)
    by_z = np.abs(r.w_total) * r.p * (r.q * np.abs(r.z) + _others(pz))
    by_t = np.abs(1 - r.eps) * (r.p * _others(wt) + r.q * wt)
    by_w = r.p * _others(aa) + r.q * aa
    own = r.w / n - r.t * r.w
    by_eps = np.abs(r.eps) * np.abs(r.p * _row_sum(own) - own)
    return np.asarray(by_z + by_t + by_w + by_eps, dtype=object)


def _loss_running_error(r: _Rows) -> np.ndarray:
    """:func:`running_error` of the explicit ℓ, node by node (u units; C >= 2; C = 1: ℓ is
    the constant 0, error 0). SymPy writes ℓ as the C-term sum of
    ``-w_c·B_c·(z_c - log(Σ_k e^{z_k}))`` (B_c = b_c as written):

    - ``Σ_k e^{z_k}``: ``Σ 2e^{z_k} + (C - 1)Σ e^{z_k} = (C + 1)·Σ``; ``log``: ``(C + 1) + 2|L|``;
    - ``z_c - L``: ``(C + 1) + 2|L| + |z_c| + |L|``;
    - the product of w_c, B_c and it (2 roundings): ``R(b_c)|w_c||L - z_c| +
      ((C + 1) + 3|L| + |z_c|)|a_c| + 2|a_c|(L - z_c)``;
    - the sum: ``+ (C - 1)·Σ_c |a_c|(L - z_c)``.
    """
    if r.n == 1:
        return np.asarray(r.z[:, 0] * 0, dtype=object)
    n, aa = r.n, np.abs(r.a)
    terms = (r.label_error * np.abs(r.w) * r.gap + ((n + 1) + 3 * r.l_abs + np.abs(r.z)) * aa
             + (n + 1) * aa * r.gap)
    return np.asarray(_row_sum(terms)[:, 0], dtype=object)


def _derivative_running_error(r: _Rows) -> np.ndarray:
    """:func:`running_error` of the explicit ``h_j`` (u units; C >= 2, else 0). SymPy writes
    ``h_j`` as the C-term sum of ``-w_j·(1 - e^{z_j}·Σ^-1)·B_j`` and, for c ≠ j,
    ``w_c·B_c·e^{z_j}·Σ^-1`` (Σ = Σ_k e^{z_k}, E(Σ) = (C + 1)Σ):

    - ``Σ^-1``: ``Σ^-2·(C + 1)Σ + Σ^-1 = (C + 2)/Σ``; ``e^{z_j}·Σ^-1`` (1 rounding):
      ``(C + 2)p_j + 2p_j + p_j = (C + 5)p_j``; ``1 - p_j``: ``(C + 6)p_j + 1``;
    - the own term (2 roundings): ``((C + 6)p_j + 1)|a_j| + R(b_j)|w_j|q_j + 2|a_j|q_j``;
    - a term c ≠ j (3 roundings): ``p_j·(R(b_c)|w_c| + (C + 7)|a_c|)``;
    - the sum: ``+ (C - 1)·(|a_j|q_j + p_j·Σ_{c≠j} |a_c|)``.

    Total ``((C + 6)p_j + 1)|a_j| + (R(b_j)|w_j| + (C + 1)|a_j|)q_j +
    p_j·(Σ_{c≠j} R(b_c)|w_c| + (2C + 6)·Σ_{c≠j} |a_c|)``.
    """
    if r.n == 1:
        return np.asarray(r.z * 0, dtype=object)
    n, aa = r.n, np.abs(r.a)
    own_label = r.label_error * np.abs(r.w)
    out = (((n + 6) * r.p + 1) * aa + (own_label + (n + 1) * aa) * r.q
           + r.p * (_others(own_label) + (2 * n + 6) * _others(aa)))
    return np.asarray(out, dtype=object)


def _is_zero(e: sympy.Expr, logs: dict[sympy.Symbol, sympy.Expr]) -> bool:
    """Is e identically 0? With each z written as log P (P > 0) it is a rational function
    of the P (plus terms in log, which cancel term by term): 0 iff its numerator expands to 0."""
    return bool(sympy.expand(sympy.numer(sympy.together(sympy.expand(e.subs(logs))))) == 0)


@functools.lru_cache(maxsize=1)
def derivation() -> tuple[sympy.Expr, sympy.Expr]:
    """SymPy's proof, for every C at once, that the forms this module evaluates are ℓ's
    derivatives: O(1) SymPy work, run once per process.

    Any two classes j ≠ k are written out and every other class enters only through
    sums that depend on neither: ``s = Σ e^{z_c}``, ``Σ t_c·w_c``, ``Σ t_c·w_c·z_c``,
    ``Σ w_c``, ``Σ w_c·z_c`` (symbols), and C is a symbol. Then
    ``ℓ = Σ_c a_c·(L - z_c)`` with ``a_c = (1 - ε)·t_c·w_c + (ε/C)·w_c``, SymPy
    differentiates it, and each difference below must vanish identically:
    ``h_j = dℓ/dz_j`` against ``(e^{z_j}·W_{-j} - a_j·D_{-j})/D`` (D = Σ e^{z_c}: shifting
    every z by m multiplies numerator and denominator by e^{-m}); ``∂ℓ/∂t_j``,
    ``∂ℓ/∂w_j``, ``∂ℓ/∂ε`` against :func:`_loss_condition`'s; ``∂h_j/∂x`` for x in
    ``z_j, z_k, t_j, t_k, w_j, w_k, ε`` against :func:`_derivative_condition`'s.

    Returns:
      ℓ, and h_j as SymPy derived it (in the symbols above).

    Raises:
      AssertionError: a form is not the derivative.
    """
    real = functools.partial(sympy.Symbol, real=True)
    zj, zk, tj, tk, wj, wk, eps = (real(x) for x in ("z_j", "z_k", "t_j", "t_k", "w_j", "w_k", "epsilon"))
    tw, twz, ws, wz = (real(x) for x in ("TW", "TWZ", "WS", "WZ"))  # the other classes' sums
    s, n = sympy.Symbol("s", positive=True), sympy.Symbol("C", positive=True, integer=True)
    ej, ek = sympy.exp(zj), sympy.exp(zk)
    d = ej + ek + s
    big_l = sympy.log(d)
    aj, ak, a_rest = ((1 - eps) * tj + eps / n) * wj, ((1 - eps) * tk + eps / n) * wk, (1 - eps) * tw + eps / n * ws
    ell = aj * (big_l - zj) + ak * (big_l - zk) + (1 - eps) * (tw * big_l - twz) + eps / n * (ws * big_l - wz)
    h = sympy.diff(ell, zj)
    total, pj, pk = aj + ak + a_rest, ej / d, ek / d
    d_eps = (wj / n - tj * wj) + (wk / n - tk * wk) + (ws / n - tw)  # Σ_c (1/C - t_c)·w_c
    claims = [
        (h, (ej * (ak + a_rest) - aj * (ek + s)) / d),
        (sympy.diff(ell, tj), (1 - eps) * wj * (big_l - zj)),
        (sympy.diff(ell, wj), ((1 - eps) * tj + eps / n) * (big_l - zj)),
        (sympy.diff(ell, eps), (1 / n - tj) * wj * (big_l - zj) + (1 / n - tk) * wk * (big_l - zk)
         + (ws * big_l - wz) / n - (tw * big_l - twz)),
        (sympy.diff(h, zj), total * pj * (1 - pj)),
        (sympy.diff(h, zk), -total * pj * pk),
        (sympy.diff(h, tj), (1 - eps) * wj * (pj - 1)),
        (sympy.diff(h, tk), (1 - eps) * wk * pj),
        (sympy.diff(h, wj), ((1 - eps) * tj + eps / n) * (pj - 1)),
        (sympy.diff(h, wk), ((1 - eps) * tk + eps / n) * pj),
        (sympy.diff(h, eps), pj * d_eps - (1 / n - tj) * wj),
    ]
    logs = {zj: sympy.log(sympy.Symbol("P_j", positive=True)), zk: sympy.log(sympy.Symbol("P_k", positive=True))}
    for got, want in claims:
        if not _is_zero(got - want, logs):
            raise AssertionError(f"softmax_ce: {want} is not SymPy's {got}")
    return ell, h


def _symbols(n: int) -> tuple[tuple[sympy.Symbol, ...], tuple[sympy.Symbol, ...], tuple[sympy.Symbol, ...]]:
    real = functools.partial(sympy.Symbol, real=True)
    z = tuple(real(f"z{c}") for c in range(n))
    t = tuple(real(f"t{c}") for c in range(n))
    w = tuple(real(f"w{c}") for c in range(n)) + (real("epsilon"),)
    return z, t, w


class SoftmaxTemplate:
    """softmax_ce with C classes, for the evaluator: the interface of
    :class:`symjac.loss._templates.LossTemplate`, computed class-generically.

    ``loss`` and ``derivatives`` are the explicit per-class SymPy forms (``explicit(C)``,
    the kind's definition, built on first use, for display: O(C²) SymPy work); nothing
    the evaluator or the verifier calls builds them.

    Arguments of every function: ``z_0..z_{C-1}, t_0..t_{C-1}, w_0..w_{C-1}, ε`` (one
    array of MPFR numbers per symbol, or mpmath numbers for one row).
    """

    kind = "softmax_ce"
    kink_args: tuple[sympy.Expr, ...] = ()
    kink_fn: Callable[..., Any] | None = None

    def __init__(self, classes: int, explicit: Callable[[int], LossTemplate]):
        derivation()  # the forms are ℓ's derivatives for every C (once per process)
        self.classes, self._build_explicit = classes, explicit
        self.pred, self.label, self.params = _symbols(classes)
        # rounding_depth of the explicit forms (node by node as in _loss_running_error):
        # Σ e^{z_k} C + 1, log C + 3, z_c - L C + 4, w_c·B_c·(z_c - L) C + 6, the C-term sum
        # 2C + 5; h_j: Σ^-1 C + 2, p_j C + 3, 1 - p_j C + 4, own term C + 6, sum 2C + 5.
        # C = 1: ℓ = 0 (SymPy folds log e^{z_0} = z_0).
        self.loss_depth = self.derivative_depth = 0 if classes == 1 else 2 * classes + 5

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        return self.pred + self.label + self.params

    @functools.cached_property
    def _explicit(self) -> LossTemplate:
        return self._build_explicit(self.classes)

    @property
    def loss(self) -> sympy.Expr:
        return self._explicit.loss

    @property
    def derivatives(self) -> tuple[sympy.Expr, ...]:
        return self._explicit.derivatives

    def _rows(self, cols: Sequence[Any], ar: _Arithmetic) -> _Rows:
        n = self.classes

        def block(k: int) -> np.ndarray:
            return np.stack([np.asarray(c, dtype=object).reshape(-1) for c in cols[k * n:(k + 1) * n]], axis=1)

        eps = np.asarray(cols[3 * n], dtype=object).reshape(-1, 1)
        return _Rows(block(0), block(1), block(2), eps, ar)

    # ---- MPFR columns, every row of a batch at once

    def stable_at(self, cols: Sequence[np.ndarray], values: bool = True,
                  derivatives: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """ℓ of every row and dℓ/dz_c, shape (rows, classes) (None for what was not asked)."""
        with _numbers.context():
            r = self._rows(cols, _MPFR)
            return (r.value() if values else None), (r.derivative() if derivatives else None)

    def loss_bounds_at(self, cols: Sequence[np.ndarray]) -> list[np.ndarray]:
        """[Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)] of every row."""
        with _numbers.context():
            r = self._rows(cols, _MPFR)
            return [_loss_condition(r, r.derivative()), _loss_running_error(r)]

    def derivative_bounds_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(conditions, running errors) of every dℓ/dz_c, each shape (rows, classes)."""
        with _numbers.context():
            r = self._rows(cols, _MPFR)
            return _derivative_condition(r), _derivative_running_error(r)

    def kink_values(self, cols: Sequence[np.ndarray]) -> list[np.ndarray]:
        return []

    def at_kink(self, cols: Sequence[np.ndarray]) -> np.ndarray:
        return np.zeros(len(cols[0]), dtype=bool)

    def clarke_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Smooth everywhere: the Clarke set is the derivative."""
        h = self.stable_at(cols, values=False)[1]
        assert h is not None
        return h, h.copy()

    # ---- mpmath, one row (inputs beyond MPFR's range)

    def _row(self, args: Sequence[Any]) -> _Rows:
        return self._rows([[a] for a in args], _MPMATH)

    def value_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ]."""
        return [self._row(args).value()[0]]

    def derivative_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [dℓ/dz_0, ...]."""
        return list(self._row(args).derivative()[0])

    def loss_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ, Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)]."""
        r = self._row(args)
        return [r.value()[0], _loss_condition(r, r.derivative())[0], _loss_running_error(r)[0]]

    def derivative_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [cond(h_c) for each c] + [running_error(h_c) for each c]."""
        r = self._row(args)
        return list(_derivative_condition(r)[0]) + list(_derivative_running_error(r)[0])

    def clarke_fn(self, *args: Any) -> list[Any]:
        h = self.derivative_fn(*args)
        return h + h

    def hessian_fn(self, *args: Any) -> list[list[Any]]:
        """mpmath: args -> ``d²ℓ/dz_j dz_k = W·p_j·(δ_jk - p_k)``, i.e. ``W·(diag(p) - p·pᵀ)``
        with ``W = Σ_c a_c`` (the loss's scale: ``h_j = W·p_j - a_j`` and ``a`` does not
        depend on z; :func:`derivation` proves both columns ``∂h_j/∂z_j``, ``∂h_j/∂z_k``)."""
        r = self._row(args)
        w, p = r.w_total[0, 0], list(r.p[0])
        return [[w * p[j] * ((1 if j == k else 0) - p[k]) for k in range(self.classes)] for j in range(self.classes)]
