"""The class-axis hinges: PyTorch ``multi_margin_loss`` and ``multilabel_margin_loss``.

One module because they share their structure: one element per row of C classes, a sum of
hinges ``[margin - z_j + z_i]₊`` over pairs of a target class j and another class i, divided
by C; a row can sit on several kinks at once, and the Clarke set keeps the side of every
hinge it is not at (:func:`symjac.loss._templates.kink_side`). The templates hold one symbol
per class (O(C²) hinges: small C; no fast route).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, index, per_class
from symjac.loss._fields import is_int, number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._kinds.hinge_embedding import margin_grid
from symjac.loss._templates import LossTemplate, element_template, positive_part

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: The default rows (C = 3; repeated to C) and their target classes: row 0 inside both hinges (off
#: every kink: the nonfinite family copies it), row 1 on the kink z_1 - z_0 = 1 (its other hinge
#: inactive), row 2 inside one hinge and beyond the other (each row's target weight shows on its own).
ROWS = ((-0.25, 1.0, 2.0), (0.5, 1.5, -1.0), (0.5, 2.0, 1.75))
TARGETS = (0, 1, 2)


@functools.lru_cache(maxsize=64)
def multi_margin_template(classes: int, p: int) -> LossTemplate:
    """``ℓ = (1/C)·Σ_y t_y·w_y·Σ_{i≠y} [m - z_y + z_i]₊^p``, t the one-hot row of the target class."""
    z = tuple(real(f"z{c}") for c in range(classes))
    t = tuple(real(f"t{c}") for c in range(classes))
    w = tuple(real(f"w{c}") for c in range(classes))
    m = real("margin")
    loss = sympy.Add(*(t[y] * w[y] * sympy.Add(*(positive_part(m - z[y] + z[i]) ** p for i in range(classes)
                                                  if i != y)) for y in range(classes))) / classes
    return element_template("multi_margin", z, t, w + (m,), loss)


@functools.lru_cache(maxsize=64)
def multilabel_margin_template(classes: int) -> LossTemplate:
    """``ℓ = (1/C)·Σ_j Σ_{i≠j} t_j·(1 - t_i)·[1 - z_j + z_i]₊``, t the row's target membership (0 or 1)."""
    z = tuple(real(f"z{c}") for c in range(classes))
    t = tuple(real(f"t{c}") for c in range(classes))
    loss = sympy.Add(*(t[j] * (1 - t[i]) * positive_part(1 - z[j] + z[i]) for j in range(classes)
                       for i in range(classes) if i != j)) / classes
    return element_template("multilabel_margin", z, t, (), loss)


def _rows(c: int, scale: float = 1.0) -> np.ndarray:
    return np.array([np.resize(row, c) for row in ROWS]) * scale


@register
class MultiMargin(LossKind):
    """PyTorch ``multi_margin_loss``: one class index y per row, ``p`` in {1, 2} (default 1), ``margin`` m
    (default 1), ``weight`` per class (w_y scales the row). At a hinge's kink ``z_y - z_i = m`` (p = 1) the
    Clarke set is accepted: PyTorch's backward takes the hinge as inactive there (``z > 0`` strictly)."""

    name = "multi_margin"
    options = ("p", "margin", "weight")
    synonyms = ("multi_margin_loss", "multimargin", "multiclass_hinge")
    class_axis = True
    explain_classes = 3
    kinks_at_defaults = True
    samples = ({}, {"p": 2}, {"margin": 0.5, "weight": (0.5, 2, 1)})

    def validate(self, loss: Loss, put: Put) -> None:
        p = 1 if loss.p is None else loss.p
        if not is_int(p) or p not in (1, 2):
            raise SpecError(f"p={loss.p!r} is not valid: give 1 or 2 (PyTorch's multi_margin_loss takes only these)")
        put("p", int(p))
        put("margin", number("margin", 1 if loss.margin is None else loss.margin, "a finite number (the margin)"))

    def labels_are_indices(self, loss: Loss) -> bool:
        return True

    def template(self, loss: Loss, classes: int) -> Template:
        assert loss.p is not None
        return multi_margin_template(classes, loss.p)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.margin is not None
        return [per_class("weight", loss.weight, classes, Fraction(1)) + [loss.margin]]

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("one_side",), evidence=(
            "PyTorch multi_margin_loss, float64: a NaN logit makes its row's loss NaN; its backward tests each hinge "
            "with z > 0, false for NaN, a hinge through the NaN is skipped: loss and derivatives are the "
            "row's limits as that entry goes to -inf (another class) or +inf (the target); ±inf: the limits"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        assert loss.margin is not None
        c = self.default_classes(loss)
        base, _ = margin_grid(loss.margin)
        # rows scaled by the margin (where it is a short positive binary number) keep row 0 on its kink
        return _rows(c, base if base > 0 else 1.0), np.array([y % c for y in TARGETS])


@register
class MultilabelMargin(LossKind):
    """PyTorch ``multilabel_margin_loss``: per row the target classes, given as PyTorch's integer row of
    class indices ended by the first negative entry (those after it are not read); margin 1. At a hinge's
    kink ``z_j - z_i = 1`` the Clarke set is accepted (PyTorch's backward: inactive there)."""

    name = "multilabel_margin"
    synonyms = ("multilabel_margin_loss", "multilabelmargin")
    class_axis = True
    explain_classes = 3
    kinks_at_defaults = True
    integer_labels = True

    def template(self, loss: Loss, classes: int) -> Template:
        return multilabel_margin_template(classes)

    def label_rows(self, loss: Loss, t: ExactArray) -> ExactArray:
        c = int(t.shape[-1])
        num = t.num.reshape(-1, c)
        if t.den != 1:
            j = int(np.flatnonzero((num % t.den != 0).reshape(-1))[0])
            raise InputError(f"label{index(t.shape, j)} is not an integer: multilabel_margin takes rows of class "
                             "indices ended by -1")
        member = np.zeros(num.shape, dtype=np.int64)
        for r, row in enumerate(num):
            for k, v in enumerate(row.tolist()):
                if v < 0:
                    break  # PyTorch reads a row up to its first negative entry
                if v >= c:
                    raise InputError(f"label{index(t.shape, r * c + k)} = {v} is out of range: class indices must be "
                                     f"in [0, {c}), a row ended by -1")
                member[r, v] = 1
        return ExactArray(member.reshape(t.shape), 1)

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("one_side",), evidence=(
            "PyTorch multilabel_margin_loss, float64: a NaN logit makes its row's loss NaN; its backward tests each "
            "hinge with z > 0, false for NaN: the row's loss and derivatives are its limits as that entry goes to "
            "-inf (a class not in the targets) or +inf (a target); ±inf: the limits"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # row 0: targets {0} (the 1 after -1 is not read), inside both hinges, off every kink (the nonfinite
        # family copies it); row 1: targets {1}, on the kink z_1 - z_0 = 1; row 2: targets {2, 0}, inside
        # the hinge (j = 0, i = 1) only; row 3: no target (a row starting with -1: ℓ = 0); row 4: targets
        # {1, 2}, on the kink z_1 - z_0 = 1 with the other hinge (j = 2, i = 0) active
        rows = np.vstack([_rows(3), [[1.0, 0.5, -0.5], [1.0, 2.0, 0.25]]])
        return rows, np.array([[0, -1, 1], [1, -1, 0], [2, 0, -1], [-1, 1, 2], [1, 2, -1]])
