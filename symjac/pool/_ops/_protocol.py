"""The pooling operator protocol: every rule a stage reads, defined once per operator.

As JAX attaches ``impl``, ``jvp`` and ``transpose`` rules to a primitive, a pooling
operator (one module of :mod:`symjac.pool._ops`) attaches here what every stage
needs; no stage compares the operator's name with a string, each reads its rule or
flag (``g.operator.vjp(...)``, ``operator_of(spec).ties``). Adaptive and global
pooling are geometries (:mod:`symjac.pool._geometry`), not operators: every operator
whose :attr:`Operator.any_geometry` is set runs on them.

The rules, by stage (CONTRIBUTING.md, "Add a pooling operator", says what a new
operator must give):

- **spec**: :meth:`check_divisor`, :meth:`check_power`, :meth:`check_pad_value`
  (the mode-specific checks of ``Pool.__post_init__``), :meth:`repr_fields`,
  :meth:`spec_table` (spec files), :meth:`counts_padding` (geometry, cover).
- **symbolic**: :meth:`template`, the SymPy template of a window class; :meth:`with_pad_cells`.
- **exact**: :meth:`forward`, :meth:`jacobian`, :meth:`vjp` (``J^T dy``),
  :meth:`jvp` (``J t``), :meth:`hvp` (the second derivative, where it is not zero);
  :meth:`exact_forward` / :meth:`exact_vjp` on rational arrays where :attr:`rational`.
- **ties**: :attr:`ties` (a tie structure with policies and the β family),
  :attr:`tie_family` (the verifier probes at tied inputs).
- **rounding model**: :meth:`forward_bound` (the verifier's forward verdict) and
  :meth:`rows` (exact rows with their bounds, the confirmations' predictions); golden data's
  bounds read them where :attr:`weighted_sum_rounding` is False.
- **lowering**: :meth:`lower_forward`, :meth:`lower_vjp`.
- **inputs**: :meth:`families`, :meth:`default_input`, :meth:`tie_input`, :meth:`extreme_input`,
  :meth:`nonfinite_input`, :attr:`extra_families`, :attr:`finite_differences` (:meth:`fd_step`,
  :meth:`fd_error`).
- **non-finite inputs**: :attr:`nan_policies`, :meth:`nonfinite` (the exact forward where it is NaN or
  ±inf, the rows there: the operator's convention), :meth:`nonfinite_note`; **overflow**:
  :meth:`overflows` (where a correct float forward may overflow though the exact value is finite).
- **diagnosis**: :meth:`clarke_ok`, :meth:`outside_clarke`, :meth:`tie_policy`,
  :meth:`zero_window_policy`, :meth:`tied_detail`, :meth:`exact_entry`, :meth:`fd_gaps`,
  :meth:`fd_rounding`.
- **metadata**: :meth:`class_note` (explain), :attr:`graph_needs_x` (pictures),
  census (:meth:`census_tied`, :meth:`census_policies`, :meth:`census_difference`),
  infer (:meth:`infer_divisors`, :meth:`neighbour_changes`), clarke
  (:attr:`ties`, :meth:`clarke_ball`), graph (:attr:`rational`, :attr:`ties`).

A rule an operator does not have raises :class:`symjac.SpecError` naming it, or
keeps the default below (documented on each rule).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError

if TYPE_CHECKING:
    from symjac._exact import ExactArray
    from symjac.check._report import Finding
    from symjac.pool._beta import Tie
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._edges import Nonfinite
    from symjac.pool._spec import Pool
    from symjac.pool._stamp import SparseJacobian, Stamp
    from symjac.pool._symbolic import Template, WindowClass
    from symjac.pool._rows import ExactRows, Rows

#: (exact forward rounded to float64, its tolerance, the exact values for a finding), canonical (B, W).
ForwardBound = tuple[np.ndarray, np.ndarray, Callable[[], np.ndarray]]


class Operator:
    """One pooling operator: its name and the rules every stage reads.

    Attributes:
      name: the ``mode`` of its specs (``Pool(name, ...)``).
      spec_type: the public spec class whose windows it pools: ``"Pool"`` (``Pool(name, ...)``,
        and :class:`symjac.AdaptivePool`/:class:`symjac.GlobalPool` where :attr:`any_geometry`)
        or an operator's own (``"FractionalMaxPool"``: its windows come from its samples).
      any_geometry: adaptive and global pooling take it too (else only :class:`symjac.Pool`).
      ties: the derivative is set-valued where the window's maximum is attained twice:
        tie sets, a Clarke set, tie policies (``first``/``last``/``split``, :class:`symjac.Beta`).
      tie_family: the verifier runs a probed pass at the tie input
        (:func:`symjac.verifiers.pool._inputs.tie_input`): max pooling's ties, lp's all-zero windows.
      rational: exact values are rationals (golden data and ``[expect]`` hold them).
      finite_differences: the verifier's finite-difference oracle applies.
      extra_families: the extra input families (``all_negative``, ``near_ties``) can be
        checked against an exact dense ``J(x)^T dy``.
      reuses_exact_input: the forward check, exact rows and dense check all read x
        exactly, so the verifier converts x once for them.
      graph_needs_x: the window graph's weights depend on x (pictures pass x).
      second_derivative_zero: the second derivative is zero off ties (piecewise linear).
      fd_directions: above ``MAX_COLOURS`` input colours the finite differences check random
        directions (:func:`symjac.verifiers.pool._fd.directional_fd`); False: only coordinate
        steps are covered by the error model (lp), so none are taken there.
      samples: keyword arguments of :class:`symjac.Pool` (beyond mode and kernel; of the whole
        spec where :attr:`spec_type` is the operator's own) the
        generic tests over every operator build specs from (``tests/test_pool_ops.py``,
        PyTorch's OpInfo ``sample_inputs``): the operator's own fields and conventions.
      kernel_windows: :class:`symjac.Pool` takes it as a ``mode`` (False: the operator has its own
        spec class and gives its windows as a table, :meth:`tables`).
      spec_name: the public spec class its specs are made with (messages name it).
      spec_class: that class, for a table operator (the generic tests build its :attr:`samples` with it).
      spec_kind: a table operator's ``[operator] kind`` in spec files ("": its :attr:`name`; RoI Align's
        max, ``roi_align_max``, is ``kind = "roi_align"`` with ``mode = "max"``).
      nan_policies: the conventions at a window holding NaN a correct implementation may follow,
        the default first (:meth:`nonfinite`): the verifier reads which one the forward follows and
        names it (``stats["nan_policy"]``), as it names the tie policy.
      explain_note: a line ``symjac explain`` prints after the operator's forms ("" for none):
        what they leave unsaid (max pooling: what ``Heaviside(0)`` means at a tie).
      weighted_sum_rounding: golden data's weighted-sum model (``γ_k·Σ|terms|``,
        :data:`symjac.io.golden._bounds.BOUND_NOTE`) covers a correct float y and dx. False (RoI
        Align: its weights come from sample coordinates that round in the dtype): golden data's
        bounds of y, dx, the Jacobian's entries and the JVP are this operator's own rounding model, :meth:`forward_bound` and
        :meth:`rows` (:mod:`symjac.io.golden._verified`), so that everything the verifier accepts
        lies within them.
    """

    name: str = ""
    spec_type: str = "Pool"
    any_geometry: bool = True
    ties: bool = False
    tie_family: bool = False
    rational: bool = True
    finite_differences: bool = True
    extra_families: bool = True
    reuses_exact_input: bool = False
    graph_needs_x: bool = False
    second_derivative_zero: bool = True
    fd_directions: bool = True
    samples: tuple[dict[str, Any], ...] = ({},)
    kernel_windows: bool = True
    spec_name: str = "symjac.Pool"
    spec_class: Any = None
    spec_kind: str = ""
    nan_policies: tuple[str, ...] = ("propagate",)
    explain_note: str = ""
    weighted_sum_rounding: bool = True

    def __repr__(self) -> str:
        return f"<pooling operator {self.name!r}>"

    # -- spec ------------------------------------------------------------------------
    def check_divisor(self, spec: Pool, divisor: str | int) -> None:
        """Raise :class:`SpecError` if ``divisor`` (already valid in itself) does not apply."""

    def check_power(self, spec: Pool, zero_window: str) -> None:
        """``p`` and ``zero_window`` (lp pooling's fields): by default they must be unset."""
        if spec.p is not None or zero_window != "zero":
            raise SpecError(f"p={spec.p!r} / zero_window={zero_window!r} are only meaningful for mode='lp'; "
                            f"leave them unset for mode={spec.mode!r}")

    def check_pad_value(self, spec: Pool) -> None:
        """``pad_value`` (given, and valid in itself): by default it does not apply."""
        raise SpecError(f"pad_value={spec.pad_value!r} is only meaningful for mode='max' (average pooling "
                        "counts padding through divisor='include_pad'); leave it unset")

    def repr_fields(self, spec: Pool) -> list[str]:
        """Fields of the operator's own that ``repr(spec)`` shows (reports and golden hashes quote it)."""
        return []

    def spec_table(self, spec: Any) -> dict[str, Any]:
        """The operator's own fields in a spec file's ``[operator]`` table."""
        return {}

    def counts_padding(self, spec: Pool) -> bool:
        """The divisor counts pad cells (average pooling's ``include_pad``)."""
        return False

    # -- table operators (RoI pooling: windows given as a table, not by a kernel) ---------
    def tables(self, spec: Any, input_shape: tuple[int, ...]) -> Any:
        """The windows of a table operator's spec at ``input_shape`` (its own spec class, not
        :class:`symjac.Pool`): an object with ``out_spatial``, ``cells``/``valid`` (windows, K) over
        the flat (N, *spatial) input of one channel, and ``starts`` (windows, rank)
        (:class:`symjac.pool._geometry.TableGeometry`)."""
        raise SpecError(f"mode={self.name!r} takes kernel windows (symjac.Pool), not a table")

    def table_size(self, spec: Any, input_shape: tuple[int, ...]) -> int:
        """An upper bound of the (window, cell) pairs of :meth:`tables` over every channel, in O(boxes)."""
        raise SpecError(f"mode={self.name!r} takes kernel windows (symjac.Pool), not a table")

    def plan_shapes(self, spec: Any, large: bool) -> list[tuple[int, ...]]:
        """A table operator's coverage plan: the input shapes :func:`symjac.cover` gives."""
        raise SpecError(f"mode={self.name!r} takes kernel windows (symjac.Pool): its plan is the geometry's")

    def table_expressions(self, g: Geometry, symbol: dict[int, sympy.Symbol]) -> np.ndarray:
        """A table operator's forward as SymPy expressions in the flat layout order (``symbol``: the
        input's symbols by flat layout index): :func:`symjac.expressions`."""
        raise SpecError(f"mode={self.name!r} takes kernel windows: its expressions come from its templates")

    def window_words(self, g: Geometry, w: int) -> str:
        """Window ``w`` in the operator's own terms, for findings (``""``: the output index says it)."""
        return ""

    # -- symbolic --------------------------------------------------------------------
    def template(self, spec: Any, n: int, divisor: int) -> Template:
        """The SymPy template of a window class of ``spec`` with ``n`` valid slots and divisor ``divisor``."""
        raise SpecError(f"mode={self.name!r} has no window-class template")

    def with_pad_cells(self, expr: sympy.Expr) -> sympy.Expr:
        """A window's expression when it also holds pad cells of ``Pool(pad_value=0)`` (constants 0)."""
        raise SpecError(f"mode={self.name!r} takes no pad_value")

    def clear_caches(self) -> None:
        """Forget the operator's cached templates."""

    # -- exact -----------------------------------------------------------------------
    def stamp(self, g: Geometry, x: ExactArray | None, tie: str) -> Stamp:
        """The exact Jacobian as a :class:`~symjac.pool._stamp.Stamp` (piecewise-constant operators)."""
        raise SpecError(f"mode={self.name!r} has no stamped (rational) Jacobian")

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> SparseJacobian:
        """The exact sparse Jacobian at ``x``."""
        raise NotImplementedError

    def vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> np.ndarray:
        """``J(x)^T dy`` exactly, SymPy values in the input's layout."""
        raise NotImplementedError

    def jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> np.ndarray:
        """``J(x) t`` exactly, SymPy values in the output's layout."""
        raise NotImplementedError

    def hvp(self, g: Geometry, x: ExactArray, dy: ExactArray, v: ExactArray) -> np.ndarray:
        """``d/dε [J(x + εv)^T dy]`` at ε = 0: the second derivative (zero off ties by default)."""
        if not self.second_derivative_zero:
            raise NotImplementedError
        out = np.empty(g.input_shape, dtype=object)
        out[...] = sympy.Integer(0)
        return out

    def forward(self, g: Geometry, x: ExactArray) -> np.ndarray:
        """The exact forward, SymPy values in the output's layout."""
        raise NotImplementedError

    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        """The exact forward as a rational array (:attr:`rational` operators)."""
        raise SpecError(f"mode={self.name!r} has algebraic values: no rational exact forward")

    def exact_vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> ExactArray:
        """``J(x)^T dy`` as a rational array (:attr:`rational` operators)."""
        raise SpecError(f"mode={self.name!r} has algebraic values: no rational exact VJP")

    def require_x(self, x: ExactArray | None, what: str = "Jacobian") -> ExactArray:
        """``x``, or :class:`InputError` for an operator whose derivative depends on it."""
        if x is None:
            raise InputError(f"{self.name} pooling's {what} depends on x: pass the input values, not only its shape")
        return x

    # -- rounding model (the verifier) -------------------------------------------------
    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        """The exact forward at x rounded to float64, how far a correct forward in ``dtype``
        may be from it, and the exact values (for a finding's ``expected``)."""
        raise NotImplementedError

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """The exact Jacobian rows at ``x`` (policy ``first`` at ties) with their bounds."""
        raise NotImplementedError

    def dense_terms(self, g: Geometry, x: ExactArray | None,
                    dy: ExactArray) -> tuple[ExactArray, np.ndarray, np.ndarray]:
        """What a dense ``J^T dy`` check needs: the exact value, Σ|terms| and the term count per cell."""
        raise SpecError(f"mode={self.name!r}: no exact dense J(x)^T dy check")

    # -- lowering --------------------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The forward in x's float dtype (a reference implementation)."""
        raise NotImplementedError

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        """``J(x)^T dy`` in x's float dtype under a named tie policy."""
        raise NotImplementedError

    # -- input families --------------------------------------------------------------
    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """The extra input families worth a pass (beyond ``distinct`` and ``ties``):
        ``all_negative``, ``near_ties``, ``orders`` (a dense pass each, for :attr:`extra_families`
        operators), ``extreme`` and ``nonfinite`` (a probed pass each)."""
        return ()

    def default_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The generated default x (distinct within every window, signed), made valid for the operator."""
        return x

    def tie_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The tie pass's x (:attr:`tie_family`; zeros and ones from
        :func:`symjac.verifiers.pool._inputs.tie_input`), made to reach the operator's nonsmooth points."""
        return x

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """The ``extreme`` family's magnitudes (:meth:`families`): ``(top, signs)``, values distinct
        within every window with magnitudes in (top/2, top] (exact in ``dtype``), near the
        dtype's overflow threshold where a correct float evaluation stays finite and the exact
        value is finite; ``signs``: ``"+"``, ``"-"``, ``"±"`` (per cell) or ``"slices"`` (one
        sign per (N, C) slice, alternating) (:func:`symjac.verifiers.pool._inputs.extreme_input`)."""
        raise SpecError(f"mode={self.name!r} has no extreme-magnitude family")

    def nonfinite_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The ``nonfinite`` family's x (NaN, +inf and -inf placed among distinct values,
        :func:`symjac.verifiers.pool._inputs.nonfinite_input`), made valid for the operator."""
        return x

    # -- non-finite inputs and overflow ------------------------------------------------
    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """The operator's reading of an x (the layout's float array) holding NaN or ±inf under NaN
        policy ``policy`` (one of :attr:`nan_policies`): the windows whose exact value is not
        finite and that value, and a finite proxy of x on which the exact rules give the
        convention's rows (:class:`~symjac.pool._ops._edges.Nonfinite`).

        Raises:
          InputError: x is outside the operator's domain there.
        """
        raise SpecError(f"mode={self.name!r} has no convention at non-finite inputs")

    def nonfinite_note(self, policy: str) -> str:
        """The convention at non-finite inputs under ``policy``, in words (findings quote it)."""
        return "NaN propagates and an infinity stays one (IEEE 754)"

    def overflows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray | None:
        """(B, W) windows where a correct float forward in ``dtype`` may overflow (return ±inf or
        NaN) though the exact value is finite (an intermediate beyond the dtype's range), or None."""
        return None

    # -- golden data -------------------------------------------------------------------
    def tie_rule(self, tie: Any) -> str | None:
        """The tie policy golden data's ``jac_*`` and ``dx`` follow where a window's maximum is
        attained more than once (``tie``: the case's, None for symjac's default); None for an
        operator whose windows cannot tie (a weighted sum: no choice to state)."""
        return None

    def golden_arrays(self, spec: Any) -> dict[str, np.ndarray]:
        """Integer arrays of the spec a test in C needs beside x and dy (golden data writes them in
        every format): none by default; the RoI operators' boxes as exact numerators and denominators."""
        return {}
    def fd_step(self, dtype: np.dtype[Any]) -> float:
        """The finite differences' step h (exact steps of a piecewise-linear forward: 1/2)."""
        return 0.5

    def fd_error(self, g: Geometry, x: np.ndarray, h: float, in_colours: np.ndarray,
                 dtype: np.dtype[Any]) -> np.ndarray | None:
        """(B, W, K) how far a correct forward's one-sided difference ``(f(x + h·e_k) - f(x))/h``
        may be from the derivative ∂y_w/∂x_k beyond what :meth:`fd_rounding` covers (a smooth
        operator's curvature and rounding), inf where it is not bounded; None: nothing more.
        Coordinate steps only: an operator giving it takes no directional differences."""
        return None

    # -- diagnosis -------------------------------------------------------------------
    def clarke_ok(self, g: Geometry, rows: Rows, exact: ExactRows, u: float) -> np.ndarray:
        """(B, W) at tied windows: the observed row is in the Clarke set (or the spec's own row)."""
        raise NotImplementedError

    def outside_clarke(self, g: Geometry, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]], u: float,
                       context: str) -> tuple[Finding | None, str | None, list[tuple[int, int]]]:
        """Tied suspects one policy outside the Clarke set explains: (finding, policy name, remaining)."""
        return None, None, suspects

    def tie_policy(self, diagnosis: Any, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]]) -> None:
        """Name the tie policy the backward follows (``diagnosis.policies``)."""

    def zero_window_policy(self, g: Geometry, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]],
                           u: float) -> str | None:
        """The row seen at all-zero windows, by name, or None."""
        return None

    def tied_detail(self, g: Geometry, exact: ExactRows, b: int, w: int, cells: list[Any]) -> tuple[str, str]:
        """(note, expected) of a ``tie_not_subgradient`` finding at tied window (b, w)."""
        raise NotImplementedError

    def exact_entry(self, g: Geometry, w: int) -> Fraction:
        """An untied nonzero exact Jacobian entry of window w, as the rational it is."""
        return Fraction(1)

    def slot_entry(self, g: Geometry, w: int, k: int) -> Fraction:
        """The untied nonzero exact Jacobian entry of window w at slot k (every slot's is
        :meth:`exact_entry` unless the weights differ within a window, as RoI Align's)."""
        return self.exact_entry(g, w)

    def fd_gaps(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """(B, W) how far x is from the nearest kink: finite differences of a smaller step stay smooth."""
        return np.full((g.batch, g.n_out), np.inf)

    def fd_rounding(self) -> bool:
        """Whether the float forward rounds (its bound enters the finite differences' error)."""
        return False

    # -- metadata --------------------------------------------------------------------
    def class_note(self, c: WindowClass) -> str:
        """What explain adds to a window class's line (e.g. ``, divisor 9``)."""
        return ""

    def census_tied(self, g: Geometry, vals: np.ndarray) -> np.ndarray:
        """(B, W) windows at the nonsmooth point (``tie_census``), from the gathered values."""
        raise InputError(f"tie_census needs max or lp pooling; mode={self.name!r} has no ties")

    def census_policies(self, betas: tuple[Any, Any]) -> tuple[Any, Any]:
        """The two policies ``tie_census`` compares."""
        raise NotImplementedError

    def census_difference(self, g: Geometry, x: ExactArray, dy: ExactArray, policies: tuple[Any, Any]) -> ExactArray:
        """Exact ``(J_1 − J_0)^T dy`` for the census's two policies."""
        raise NotImplementedError

    def infer_divisors(self, divisors: tuple[Any, ...]) -> tuple[Any, ...]:
        """The divisor conventions :func:`symjac.infer` tries."""
        return ("exclude_pad",)

    def neighbour_changes(self, spec: Any, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        """The operator's own one-convention changes of ``spec`` for hints, tried after the
        divisor (:meth:`infer_divisors`), padding, ceil and layout changes."""
        return []

    def clarke_ball(self, g: Geometry, x: ExactArray) -> tuple[np.ndarray, int] | None:
        """:func:`symjac.in_clarke_set` at a smooth operator's nonsmooth points: (B, W) the windows
        whose rows must lie in the dual unit ball of the p-norm, and p; None where there are none."""
        return None

