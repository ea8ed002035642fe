"""triplet_margin: PyTorch ``triplet_margin_loss``, one loss element per (anchor, positive, negative) triple.

A loss kind has one differentiable input, pred; PyTorch's loss has three (anchor a, positive q,
negative n, each (N, D)). As gaussian_nll folds its variance into pred, this kind folds all
three: one element per row of ``3·D`` entries along pred's last axis, ``pred[..., :D]`` the
anchor, ``pred[..., D:2D]`` the positive and ``pred[..., 2D:]`` the negative, so ``S·dL/dpred``
holds the three derivatives side by side and every stage (the exact route, the bounds, finite
differences, the families, the Hessian, golden data) applies unchanged. No label.

``ℓ = [d(a, q) - d(a, n) + m]₊`` with ``d(x, y) = ‖x - y + ε‖_p`` (PyTorch's ``pairwise_distance``
adds ε to the difference: measured, ``pairwise_distance([1, 2], [0, 0], eps=0.5) = √(1.5² + 2.5²)``
in torch 2.13, and its source ``norm(x1 - x2 + eps, p)``), m = ``margin`` (> 0, default 1), ε =
``eps`` (default 1e-6), p = 1 or 2 (default 2). ``swap=True`` replaces ``d(a, n)`` by
``min(d(a, n), d(q, n))`` (the distance swap), written ``(d(a, n) + d(q, n) - |d(a, n) - d(q, n)|)/2``.

The kinks, each a ``sign`` in the SymPy derivative, their Clarke set the hull of both sides
(accepted, as the margin family's): the hinge at ``d(a, q) - d(a, n) + m = 0`` (PyTorch's
``clamp_min`` backward takes the active side), ``|·|`` at ``x_i - y_i + ε = 0`` with p = 1
(PyTorch: sign(0) = 0, inside the hull) and the swap's min at ``d(a, n) = d(q, n)``. The
Euclidean norm at 0 (``x - y + ε = 0`` in every entry) has the unit ball as its Clarke set, which
is no hull of ``sign = ±1``: such an input is refused (an InputError naming it), at D = 1 too,
where the template keeps the norm ``√(d² + o²)`` as written (o a coordinate that is always 0)
rather than SymPy's ``|d|``, so the rounding model is the norm's an implementation evaluates.

p = 2's distance is a square root: its exact value comes from MPFR's correctly rounded sqrt at
200 bits (as exp and log do for softmax_ce), and the rounding model charges it as any libm
function (2u, wider than IEEE's correctly rounded sqrt: never narrower), the sum of squares as
any sum; an implementation forming ``Σ(x - y + ε)²`` overflows where the squares do while the
distance is finite (the ``extreme`` family's D = 2 rows; PyTorch's norm of 2 or more entries does).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, square_overflow
from symjac.loss._fields import is_int, number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._kinds.hinge_embedding import margin_grid
from symjac.loss._kinds.poisson_nll import flag
from symjac.loss._templates import LossTemplate, element_template, positive_part

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: PyTorch's default ε (``triplet_margin_loss(eps=1e-6)``), the binary float it is.
DEFAULT_EPS = 1e-6
#: The parts of a row: anchor, positive, negative.
PARTS = 3

#: The default rows (D = 1: a, q, n) in units of the margin's binary magnitude (every entry's
#: a - q + ε and a - n + ε keep their sign for ε < 1/8, so ε cancels in the hinge's argument
#: ``n - q + m`` wherever a is beyond both): row 0 inside the hinge, off every kink (the
#: nonfinite family copies it; its hinge is inactive in the limit a -> +inf, where PyTorch reads
#: inf - inf = NaN); row 1 on the hinge's kink (a - q = 1, a - n = 2); row 2 a = q, inside the
#: hinge (on the swap's kink d(a, n) = d(q, n) with swap); row 3 beyond the hinge (ℓ = 0);
#: row 4 the anchor between q and n, inside the hinge.
ROWS = ((-1.0, 1.5, -0.25), (2.0, 1.0, 0.0), (0.5, 0.5, 0.0), (0.25, 0.5, 3.0), (0.0, -0.75, 1.25))


@functools.lru_cache(maxsize=64)
def triplet_template(dim: int, p: int, swap: bool) -> LossTemplate:
    """``ℓ = [d(a, q) - d(a, n) + m]₊``, ``d(x, y) = ‖x - y + ε‖_p`` (``min(d(a, n), d(q, n))`` with
    ``swap``), over one row of ``3·dim`` symbols: the anchor, the positive, the negative."""
    z = tuple(real(f"z{c}") for c in range(PARTS * dim))
    a, q, n = z[:dim], z[dim:2 * dim], z[2 * dim:]
    eps, m, o = real("eps"), real("margin"), real("o")

    def dist(x: tuple[sympy.Symbol, ...], y: tuple[sympy.Symbol, ...]) -> sympy.Expr:
        diff = [xi - yi + eps for xi, yi in zip(x, y)]
        if p == 1:
            return sympy.Add(*(sympy.Abs(d) for d in diff))
        # at dim = 1 SymPy writes √(d²) as |d| and its derivatives as sign(d) and 0, which are not the
        # forms an implementation of the norm evaluates (its double backward 1/‖d‖ - d²/‖d‖³ rounds off 0):
        # a coordinate o, always 0 (its value in params), keeps √(d² + o²) the norm as written
        return sympy.sqrt(sympy.Add(*(d ** 2 for d in diff), *((o ** 2,) if dim == 1 else ())))

    d_an = dist(a, n)
    if swap:
        d_qn = dist(q, n)
        d_an = (d_an + d_qn - sympy.Abs(d_an - d_qn)) / 2
    return element_template("triplet_margin", z, (), (eps, m, o), positive_part(dist(a, q) - d_an + m))


@register
class TripletMargin(LossKind):
    """PyTorch ``triplet_margin_loss``: per row ``[a | q | n]`` of 3·D entries, ``ℓ = [d(a, q) - d(a, n) + m]₊``
    with ``d(x, y) = ‖x - y + ε‖_p`` (see the module's docstring); ``margin`` > 0 (default 1), ``p`` in
    {1, 2} (default 2), ``eps`` >= 0 (default 1e-6), ``swap`` (default False)."""

    name = "triplet_margin"
    options = ("margin", "p", "eps", "swap")
    synonyms = ("triplet_margin_loss", "tripletmarginloss", "tripletmargin", "triplet_loss", "triplet")
    class_axis = True
    takes_label = False
    explain_classes = PARTS
    kinks_at_defaults = True
    samples = ({}, {"p": 1}, {"swap": True}, {"p": 1, "swap": True, "margin": 0.5, "eps": 0.25})

    def validate(self, loss: Loss, put: Put) -> None:
        p = 2 if loss.p is None else loss.p
        if not is_int(p) or p not in (1, 2):
            raise SpecError(f"p={loss.p!r} is not valid: give 1 or 2 (symjac's triplet_margin takes the L1 and the "
                            "Euclidean distance; PyTorch's default is 2)")
        put("p", int(p))
        margin = number("margin", 1 if loss.margin is None else loss.margin, "a finite number > 0 (the margin)")
        if margin <= 0:
            raise SpecError(f"margin={loss.margin!r} is not valid: give a number > 0 (PyTorch's triplet_margin_loss "
                            "raises on margin <= 0)")
        put("margin", margin)
        eps = number("eps", DEFAULT_EPS if loss.eps is None else loss.eps, "a finite number >= 0")
        if eps < 0:
            raise SpecError(f"eps={loss.eps!r} is not valid: give a number >= 0 (added to the difference x - y "
                            "inside the distance; PyTorch's default is 1e-6)")
        put("eps", eps)
        flag(loss, put, "swap", False)

    def template(self, loss: Loss, classes: int) -> Template:
        if classes % PARTS or classes == 0:
            raise InputError(f"pred has {classes} entries along its last axis: kind='triplet_margin' takes rows of "
                             "3·D, the anchor, the positive and the negative side by side ([a | q | n])")
        assert loss.p is not None
        return triplet_template(classes // PARTS, loss.p, bool(loss.swap))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.eps is not None and loss.margin is not None
        return [[loss.eps, loss.margin, Fraction(0)]]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        c = int(z.shape[-1]) if len(z.shape) else 0
        dim = c // PARTS
        if loss.p != 2 or dim < 1 or c % PARTS:
            return
        assert loss.eps is not None
        rows = z.num.reshape(-1, c).astype(object)
        parts = [rows[:, k * dim:(k + 1) * dim] for k in range(PARTS)]
        pairs = [(0, 1), (0, 2)] + ([(1, 2)] if loss.swap else [])
        e_num, e_den = loss.eps.numerator, loss.eps.denominator
        for x, y in pairs:  # x - y + ε = 0 in every entry: (x - y)·den(ε) + num(ε)·den = 0
            zero = ((parts[x] - parts[y]) * e_den + e_num * z.den == 0).all(axis=1)
            if zero.any():
                r = int(np.flatnonzero(zero)[0])
                names = ("anchor", "positive", "negative")
                raise InputError(f"row {r} of pred: {names[x]} - {names[y]} + eps is 0 in every entry, where the "
                                 "Euclidean distance has no derivative (its Clarke set is the unit ball, which "
                                 "symjac does not evaluate); move the row off it")

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("zero",), evidence=(
            "PyTorch triplet_margin_loss, float64: a NaN entry makes its row's loss NaN; p = 1: every derivative of "
            "the row 0 (clamp_min's backward reads the NaN comparison as inactive), p = 2: NaN (the norm's backward "
            "x/‖x‖); an anchor at ±inf gives inf - inf = NaN, its row's loss NaN and derivatives 0 (p = 1) or NaN: "
            "the limit where the hinge is inactive there (the family's row), not where it is active; a positive at "
            "±inf: loss +inf and the limits (p = 1) or NaN (p = 2, inf/inf); a negative at ±inf: loss 0, "
            "derivatives 0 (the limits) or NaN"))

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # p = 2: D = 2 rows of differences from G/2 to 2G (G = square_overflow: G² overflows the dtype,
        # 4G does not), where Σ(x - y + ε)² overflows (PyTorch's norm of 2 or more entries: loss inf,
        # derivative x/inf = 0; of 1 entry it is |x|) while every distance and ℓ are finite; rows:
        # beyond the hinge, inside it twice (off every kink). p = 1 forms no square: its float
        # evaluation overflows only where the exact value does.
        if loss.p == 1:
            return None
        g = square_overflow(dt)
        return np.array([[g, -g, -g / 2, g / 2, 2 * g, g], [-g, g, g, g / 2, -g / 2, g],
                         [g / 2, g, g, -g, -g, g / 2]]), None

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        assert loss.margin is not None and loss.eps is not None
        base, _ = margin_grid(loss.margin)
        rows = np.array(ROWS) * (base if base > 0 else 1.0)
        eps = float(loss.eps)
        if 0 < eps < 1 and float(np.float16(eps)) == eps and loss.p == 1:  # a - q + ε = 0: the p = 1 |·| kink
            rows = np.vstack([rows, [[0.0, eps, base / 4]]])  # inside the hinge
        return rows, None
