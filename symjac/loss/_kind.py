"""The loss-kind protocol: one definition per kind holds what every stage needs, and the registry.

Modelled on JAX's primitives: a kind is defined once (a :class:`LossKind` subclass in
its own module of :mod:`symjac.loss._kinds`) and carries its rules as attributes and
methods; the spec, the evaluator, the bounds, the verifier, golden data and
``explain`` look the kind up in :data:`REGISTRY` (``REGISTRY[loss.kind]``, one dict
lookup) and read the rules, never compare the name with a string. Registering a kind
is one module plus its tests (CONTRIBUTING.md, "Add a loss kind").

The rules, by the stage that reads them:

- *spec* (:class:`symjac.Loss`): :attr:`~LossKind.options` it takes,
  :attr:`~LossKind.synonyms` (other libraries' names, for "did you mean"),
  :meth:`~LossKind.validate` (its own options' values).
- *labels*: :attr:`~LossKind.class_axis` (one element per row, classes along the last
  axis; else one element per prediction entry), :attr:`~LossKind.takes_label`,
  :meth:`~LossKind.labels_are_indices` (integer class per row), :attr:`~LossKind.integer_labels`,
  :meth:`~LossKind.label_rows` (a kind's own label layout as per-class rows).
- *domain*: :meth:`~LossKind.check_domain` (exact comparisons on the rational inputs),
  :meth:`~LossKind.fd_step` / :meth:`~LossKind.stencil_inside` (what finite
  differences must respect).
- *template*: :meth:`~LossKind.template` (the SymPy element loss and its derivatives,
  lowered; the Clarke set is the template's: the hull over ``sign = ±1`` at a kink),
  :meth:`~LossKind.params` (the template's option values per class),
  :meth:`~LossKind.second_derivative` (``d²ℓ/dz²`` from one more SymPy
  differentiation, or softmax_ce's ``W·(diag(p) - ppᵀ)``).
- *reduction*: :meth:`~LossKind.mean_weights` (a mean over label weights instead of
  the element count).
- *rounding model*: :meth:`~LossKind.amplitude` (what the underflow term's ``A``
  takes beyond the weights), besides the template's depths and running errors;
  :meth:`~LossKind.fast_derivative` (a float64 enclosure of the derivative and lower
  bounds on its bound's terms: the verifier's fast filter); :meth:`~LossKind.fast_value`
  (the same for the loss value: the forward's fast filter).
- *inputs*: :meth:`~LossKind.default_inputs`; the extra families (:mod:`symjac.loss._families`):
  :meth:`~LossKind.extreme_inputs` (magnitudes where a naive float evaluation overflows and a
  stable one does not), :meth:`~LossKind.nonfinite` (the convention at a NaN or ±inf
  prediction) with :meth:`~LossKind.limits` (the loss and derivative as an entry goes to ±inf).
- *explain*: :attr:`~LossKind.explain_classes` (how many classes to show without a
  prediction).
- *tests*: :attr:`~LossKind.samples` (option sets the generic tests run every rule with).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import sympy

from symjac._exact import ExactArray
from symjac.loss._domain import Convention
from symjac.loss._fast import FastDerivative, FastValue
from symjac.loss._softmax import SoftmaxTemplate
from symjac.loss._templates import LossTemplate

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: A kind's template: element-wise (:class:`LossTemplate`) or class-generic (softmax_ce).
Template = LossTemplate | SoftmaxTemplate
#: Sets a field of the frozen spec during validation (``object.__setattr__`` on it).
Put = Callable[[str, Any], None]


class LossKind:
    """One loss kind's definition: every rule the stages read (see the module docstring).

    Subclasses set :attr:`name` and the rules that differ from these defaults, and are
    registered with the :func:`register` decorator (one instance each).
    """

    #: the spec's ``kind``.
    name: ClassVar[str]
    #: the spec options this kind takes; every other option must be left unset.
    options: ClassVar[tuple[str, ...]] = ()
    #: other libraries' names of this kind (for "did you mean").
    synonyms: ClassVar[tuple[str, ...]] = ()
    #: one loss element per row of pred, classes along its last axis (else one per entry).
    class_axis: ClassVar[bool] = False
    #: with a class axis: a row's loss is a sum of per-class terms, so each entry's derivative depends
    #: on its own prediction only (multilabel_soft_margin); a NaN or ±inf entry then reaches its own
    #: derivative and its row's loss, not the row's other derivatives.
    separable_rows: ClassVar[bool] = False
    #: the loss reads a label.
    takes_label: ClassVar[bool] = True
    #: classes ``explain`` shows when a case gives no prediction.
    explain_classes: ClassVar[int] = 1
    #: option sets the generic tests run the kind's rules with (tests/test_loss_kinds.py,
    #: on :meth:`default_inputs`): the options' cases the rules branch on.
    samples: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    #: the default inputs put some entries on a kink on purpose (the margin family's ``[a]₊`` at
    #: ``a = 0``, where bugs hide): the Clarke set is accepted there and its policy named; every
    #: other kind's defaults stay off its kinks.
    kinks_at_defaults: ClassVar[bool] = False
    #: the label is integers (class indices in some layout) even where :meth:`labels_are_indices`
    #: is False (multilabel_margin's rows of indices ended by -1): passed to an implementation as int64.
    integer_labels: ClassVar[bool] = False
    #: evaluated whole, not through an element template: a sequence loss (ctc), whose loss sums
    #: over alignments of a whole input. Its :meth:`evaluate_whole` gives the exact values and
    #: bounds, ``loss_value``/``loss_derivative`` and ``verify_loss``'s sequence route
    #: (:mod:`symjac.verifiers.loss._sequence`) read it; the template stages refuse it (its
    #: :meth:`template` raises a :class:`symjac.SpecError` naming them).
    whole: ClassVar[bool] = False

    # ---- spec

    def validate(self, loss: Loss, put: Put) -> None:
        """Check and normalise this kind's own options (raise :class:`symjac.SpecError`)."""

    def evaluate_whole(self, loss: Loss, pred: Any, label: Any, upstream: Any = None) -> Any:
        """A :attr:`whole` kind's exact evaluation (values, derivative, rounding bounds) at the inputs."""
        raise NotImplementedError(f"kind={self.name!r} is evaluated through its template")

    # ---- labels and shapes

    def labels_are_indices(self, loss: Loss) -> bool:
        """Is the label one integer class index per element (not of pred's shape)?"""
        return False

    def classes(self, pred_shape: tuple[int, ...]) -> int:
        """Prediction entries per loss element."""
        return int(pred_shape[-1]) if self.class_axis else 1

    def element_shape(self, pred_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the loss elements (and of a ``"none"`` reduction's upstream)."""
        return tuple(pred_shape[:-1]) if self.class_axis else tuple(pred_shape)

    def label_rows(self, loss: Loss, t: ExactArray) -> ExactArray:
        """The label as the template reads it, from the label of pred's shape as given (read
        exactly): itself, or a kind's own layout turned into per-class rows (multilabel_margin's
        index rows into membership rows). Raise :class:`symjac.InputError` naming a bad entry."""
        return t

    # ---- domain

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        """Raise :class:`symjac.InputError` naming the first input outside the domain."""

    def fd_step(self, loss: Loss, z: float, h: float) -> float | None:
        """The finite-difference step at prediction ``z`` given the optimal ``h``:
        narrowed to stay inside the domain, or None where no centred stencil fits."""
        return h

    def stencil_inside(self, loss: Loss, zm: Any, zp: Any) -> bool:
        """Are both stencil points ``fl(z ± h)`` inside the domain?"""
        return True

    # ---- template

    def template(self, loss: Loss, classes: int) -> Template:
        """The SymPy template of one element (``classes`` entries per element)."""
        raise NotImplementedError

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        """The template's option values (its ``params`` symbols in order), one row per
        class along pred's last axis (one row if they do not vary)."""
        return [[]]

    def second_derivative(self, template: Template, *args: Any) -> list[list[Any]]:
        """mpmath: the template's arguments -> ``d²ℓ/dz_c dz_k`` (classes x classes)."""
        return template.hessian_fn(*args)

    # ---- reduction and rounding

    def mean_weights(self, loss: Loss, classes: int) -> list[Fraction] | None:
        """Per class the weight a labelled row adds to ``"mean"``'s divisor, or None
        (the divisor is the number of elements)."""
        return None

    def fast_derivative(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                        column: np.ndarray | None = None) -> FastDerivative | None:
        """The verifier's fast filter (:mod:`symjac.verifiers.loss.fast._filter`): at float64
        blocks ``z``, ``y`` of pred and label (elements, or (rows, C) for a class axis;
        class indices, one per row, for :meth:`labels_are_indices`), ``dℓ/dz`` enclosed
        with a proven error bound, and lower (and, where derived, upper) bounds on the
        condition sum and running error the derivative bound is made of; None where this
        kind (with these options) has no fast form (every cell then takes the exact route).
        ``column``: for an element-wise kind, each entry's index along pred's last axis
        (what a per-class option is indexed by)."""
        return None

    def fast_value(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                   column: np.ndarray | None = None) -> FastValue | None:
        """The forward's fast filter (:mod:`symjac.verifiers.loss.fast._forward`): at the
        blocks :meth:`fast_derivative` reads, each element's loss ``ℓ_i`` enclosed, and lower
        bounds on the condition sum and running error of the forward bound; None where this
        kind (with these options) has none (the forward then takes the exact route)."""
        return None

    def amplitude(self, loss: Loss) -> Any:
        """An amplification of underflow beyond the weights (``A`` in
        :mod:`symjac.loss._bounds`, an MPFR number; called in its context), or None."""
        return None

    # ---- inputs

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        """Small deterministic ``(pred, label)`` in the domain (see :func:`symjac.default_loss_inputs`),
        :meth:`default_classes` wide along the last axis (the generic default input widens
        a kind's 3-wide rows by repeating them; a kind whose rows cannot be repeated, as
        softmax_ce's probability rows, builds them that wide itself)."""
        raise NotImplementedError

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The ``extreme`` family's ``(pred, label)`` in dtype ``dt`` (3 wide along the last axis,
        widened as :meth:`default_inputs` is; values exact in ``dt``): magnitudes at which the
        kind's exact values are finite in ``dt``, and so is a correct float evaluation (the
        stable forms: a log-sum-exp shifted by its max, a softplus through ``e^-|z|``), while a
        naive one overflows, takes the log of an underflowed 0 or cancels (built from
        :func:`symjac.loss._domain.overflow_logit` and its siblings). None where the kind's
        float evaluation overflows only where its exact value does: no such family."""
        return None

    def nonfinite(self, loss: Loss) -> Convention:
        """The convention at a NaN or ±inf prediction (the ``nonfinite`` family's and a given
        pred's): which values it takes and what it accepts besides NaN and the limits (see
        :class:`symjac.loss._domain.Convention`), with the frameworks' measured behaviour."""
        return Convention()

    def limits(self, loss: Loss, template: Template, args: Sequence[Fraction], slot: int,
               sign: int) -> tuple[Any, list[Any]]:
        """``(ℓ, [dℓ/dz_c ...])`` as prediction ``slot`` of one element goes to ``sign``·∞, the
        element's other arguments (``template.symbols`` order) at ``args``: mpmath numbers,
        ±inf, or None where there is no limit. Default: SymPy's limits of the template."""
        assert isinstance(template, LossTemplate)
        return template.limits(args, slot, sign)

    def default_classes(self, loss: Loss) -> int:
        """The last-axis length of the default inputs: the length of a per-class option
        (``weight``, ``pos_weight``) given with more than one entry, else 3."""
        for option in self.options:
            value = getattr(loss, option, None)
            if isinstance(value, tuple) and len(value) > 1:
                return len(value)
        return 3


class ElementwiseKind(LossKind):
    """A kind whose loss is one SymPy expression per prediction entry: :meth:`expressions`
    gives it, SymPy differentiates it (:func:`symjac.loss._templates.element_template`),
    built once per :meth:`template_key`."""

    def __init__(self) -> None:
        self._built: dict[tuple[Any, ...], LossTemplate] = {}

    def template_key(self, loss: Loss) -> tuple[Any, ...]:
        """The spec fields the expression depends on (the template is built once per key)."""
        return ()

    def expressions(self, *key: Any) -> LossTemplate:
        """The template for one key: :func:`symjac.loss._templates.element_template` of the
        kind's SymPy element loss."""
        raise NotImplementedError

    def template(self, loss: Loss, classes: int) -> Template:
        key = self.template_key(loss)
        tpl = self._built.get(key)
        if tpl is None:
            tpl = self._built[key] = self.expressions(*key)
        return tpl


#: Every registered kind, by name, in registration order (the order :data:`symjac.loss._spec.KINDS` lists).
REGISTRY: dict[str, LossKind] = {}


K = TypeVar("K", bound=type[LossKind])


def register(cls: K) -> K:
    """Class decorator: add the kind's definition (an instance) to :data:`REGISTRY`, once per name."""
    if cls.name in REGISTRY:
        raise ValueError(f"loss kind {cls.name!r} is registered twice")
    REGISTRY[cls.name] = cls()
    return cls


def real(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)
