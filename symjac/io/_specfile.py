"""Spec files: TOML descriptions of an operator, its inputs and expected values.

A file holds one case (top-level ``[operator]``, ``[input]``, ``[expect]``) or
several (``[[case]]`` tables with the same three keys and a ``name``)::

    name = "nntrainer avg pool, SAME, 2x2"
    [operator]
    kind = "pool"            # pool | adaptive_pool | global_pool | fractional_max_pool | ... | loss
    mode = "avg"
    kernel = [2, 2]
    stride = 1
    padding = "same"
    [input]
    x = [[1, 2], [3, 4]]     # exact: ints, decimals or "3/4" strings
    dy = [[1, 1], [1, 1]]
    [expect]
    forward = [["5/2", 3], ["7/2", 4]]
    gradient = [["1/4", "3/4"], ["3/4", "9/4"]]

A max pooling's ``[operator]`` may name its tie policy: ``tie = "first"``, ``"last"``, ``"split"``
or ``"beta:<b>"`` (J_b = b·J_split + (1 − b)·J_first, b exact, e.g. ``"beta:1/2"``). Expected
gradients and golden data use it, and ``symjac verify`` demands it (default: any Clarke element).

Inputs are explicit or generated (``generator = "distinct" | "ties" | "random"``, ``seed``,
``shape``). Strings are read as exact decimals or fractions ("0.1" is 1/10); TOML floats are their
exact binary values. Unknown keys and bad values raise :class:`symjac.SpecError` naming the file,
the key and the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
import re
import tomllib
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError, SymjacError, did_you_mean, named_by, nearest_file
from symjac._exact import magnitude
from symjac.loss._spec import KINDS, SYNONYMS, Loss, check_loss
from symjac.pool._foreign import foreign_hint, toml_text
from symjac.pool._ops.unpool import MaxUnpool, check_unpool_spec, refuse_scatter
from symjac.pool._spec import AdaptivePool, FractionalMaxPool, GlobalPool, Pool, RoiAlign, RoiPool, check_pool_spec

POOL_INPUT_KEYS = ("shape", "x", "dy", "generator", "seed")
LOSS_INPUT_KEYS = ("pred", "label", "upstream")
EXPECT_KEYS = ("forward", "gradient", "output_shape", "pads", "nnz", "value", "derivative", "base_derivative")
CASE_KEYS = ("name", "description", "operator", "input", "expect")
TOP_KEYS = CASE_KEYS + ("case",)


@dataclasses.dataclass(frozen=True)
class Case:
    """One operator with its inputs and expectations.

    Attributes:
      name: the case's name.
      operator: a pooling spec or a :class:`symjac.Loss`.
      inputs: the ``[input]`` table with exact values as object arrays (x, dy, pred,
        label, upstream), ``shape`` as a tuple, and ``generator``/``seed``.
      expect: the ``[expect]`` table, values as given.
      source: ``path`` or ``path#case-name`` for messages.
      tie: the ``[operator]`` tie policy (a name or :class:`symjac.Beta`), or None.
    """

    name: str
    operator: Any
    inputs: dict[str, Any]
    expect: dict[str, Any]
    source: str
    tie: Any = None

    @property
    def is_loss(self) -> bool:
        return type(self.operator).__name__ == "Loss"

    @property
    def is_scatter(self) -> bool:
        """Max unpooling: a scatter with indices, not a window reduction (its golden data: ``io/golden/_unpool``)."""
        return isinstance(self.operator, MaxUnpool)


@dataclasses.dataclass(frozen=True)
class SpecFile:
    path: Path
    cases: tuple[Case, ...]


def _unknown(where: str, key: str, valid: tuple[str, ...], value: Any = None) -> SpecError:
    foreign = foreign_hint(key, value, toml_text, valid)  # another library's name for one of these keys
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f"{foreign}; " if foreign else f"did you mean {near[0]!r}? " if near else ""
    return SpecError(f"{where}: unknown key {key!r}; {hint}valid keys: {', '.join(valid)}")


def _check_keys(where: str, table: Any, valid: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table, got {type(table).__name__}")
    for key in table:
        if key not in valid:
            raise _unknown(where, key, valid, table[key])
    return table


def _toml_spelling(message: str) -> str:
    """A spec's message in TOML's words: its booleans are ``true``/``false`` (``ceil_mode = "true"``
    is a string, and Python's ``True`` is no TOML)."""
    return re.sub(r"\b(True|False)\b", lambda m: m.group(1).lower(), message)


def _tuples(value: Any) -> Any:
    """TOML arrays -> tuples (specs are hashable)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def exact_array(value: Any, where: str) -> np.ndarray:
    """A TOML array of exact numbers as an object array of Fractions."""
    from symjac._exact import ExactArray

    try:
        arr = np.array(value, dtype=object)
        if arr.dtype != object or arr.ndim == 0 and isinstance(value, list):
            raise ValueError
        return ExactArray.from_any(arr, where).to_fractions()
    except (InputError, ValueError) as exc:
        message = str(exc) or "not a rectangular array of numbers"
        raise SpecError(message if message.startswith(where) else f"{where}: {message}") from None


def _pool(args: dict[str, Any], where: str) -> Any:
    if "mode" not in args or "kernel" not in args:
        raise SpecError("a pool needs 'mode' and 'kernel'")
    return Pool(args.pop("mode"), args.pop("kernel"), **args)


def _given(cls: Any, *names: str) -> Any:
    """The builder of a spec taking ``names`` (None where absent) positionally, the rest by keyword."""
    return lambda args, where: cls(*[args.pop(n, None) for n in names], **args)  # (popped before ** reads args)


def _boxes(cls: Any, kind: str, **renames: str) -> Any:  # a RoI builder: output_size required; renames: key -> field
    def build(args: dict[str, Any], where: str) -> Any:
        if "output_size" not in args:
            raise SpecError(f"a {kind} needs 'output_size' (bins per box)")
        return cls(args.pop("output_size"), **{renames.get(k, k): v for k, v in args.items()})
    return build


def _loss(args: dict[str, Any], where: str) -> Any:
    if "loss" not in args:
        raise SpecError("a loss needs 'loss' (its kind, e.g. 'mse')")
    loss_kind = args.pop("loss")
    if loss_kind not in KINDS:  # the file's key is 'loss' (its 'kind' is "loss"): name that key
        raise SpecError(f"loss={loss_kind!r} is not valid{did_you_mean(loss_kind, KINDS, SYNONYMS)}: "
                        f"give one of {', '.join(map(repr, KINDS))}")
    for key in ("scale", "delta", "label_smoothing", "eps", "margin"):
        if isinstance(args.get(key), str):
            args[key] = exact_array(args[key], f"{where}.{key}").item()
    return Loss(loss_kind, **args)


@dataclasses.dataclass(frozen=True)
class OperatorTable:
    """How an ``[operator]`` table of one ``kind`` reads.

    Attributes:
      keys: its valid keys (``kind`` and ``tie`` included).
      inputs: the valid ``[input]`` keys of its cases.
      build: ``build(args, where) -> spec``, ``args`` the table without ``kind`` and ``tie``
        (TOML arrays as tuples), ``where`` the table's place for messages.
      pooling: the spec is a pooling operator (what a sweep grid runs, through
        :func:`symjac.verifiers.pool._verify.verify`).
    """

    keys: tuple[str, ...]
    inputs: tuple[str, ...]
    build: Callable[[dict[str, Any], str], Any]
    pooling: bool


#: ``[operator] kind`` -> how that table reads; spec files, sweep files and reproducers look the kind up here.
OPERATOR_TABLES = {
    "pool": OperatorTable(("kind", "mode", "kernel", "stride", "padding", "dilation", "ceil_mode", "divisor",
                           "layout", "p", "zero_window", "tie", "pad_value"), POOL_INPUT_KEYS, _pool, True),
    "adaptive_pool": OperatorTable(("kind", "mode", "output_size", "layout"), POOL_INPUT_KEYS,
                                   _given(AdaptivePool, "mode", "output_size"), True),
    "global_pool": OperatorTable(("kind", "mode", "rank", "layout"), POOL_INPUT_KEYS, _given(GlobalPool, "mode"), True),
    "fractional_max_pool": OperatorTable(("kind", "kernel", "output_size", "samples", "sequences", "overlapping",
                                          "layout", "tie"), POOL_INPUT_KEYS,
                                         _given(FractionalMaxPool, "kernel", "output_size"), True),
    "max_unpool": OperatorTable(("kind", "kernel", "stride", "padding", "output_size", "indices", "flat", "write"),
                                POOL_INPUT_KEYS, _given(MaxUnpool, "kernel"), False),  # its generators: families
    "roi_align": OperatorTable(("kind", "output_size", "boxes", "spatial_scale", "sampling_ratio", "aligned", "mode"),
                               POOL_INPUT_KEYS, _boxes(RoiAlign, "roi_align", mode="reduction"), True),
    "roi_pool": OperatorTable(("kind", "output_size", "boxes", "spatial_scale"), POOL_INPUT_KEYS,
                              _boxes(RoiPool, "roi_pool"), True),
    "loss": OperatorTable(("kind", "loss", "reduction", "scale", "delta", "pos_weight", "weight",
                           "label_smoothing", "ignore_index", "labels", "log_input", "log_target", "full", "eps",
                           "margin", "p", "swap"),
                          LOSS_INPUT_KEYS, _loss, False),
}


def operator_table(table: Any, where: str) -> OperatorTable:
    """The :class:`OperatorTable` of an ``[operator]`` table's ``kind``; a missing or unknown
    kind is a :class:`SpecError` naming the nearest valid one."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with kind = \"pool\" | ..., got {type(table).__name__} {table!r}")
    kind = table.get("kind")
    reader = OPERATOR_TABLES.get(kind) if isinstance(kind, str) else None
    if reader is None:
        near = difflib.get_close_matches(str(kind), OPERATOR_TABLES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise SpecError(f"{where}.kind: {kind!r} is not valid{hint}; give one of {', '.join(OPERATOR_TABLES)}")
    return reader


def _operator(table: Any, where: str) -> Any:
    reader = operator_table(table, where)
    _check_keys(where, table, reader.keys)
    args = {k: _tuples(v) for k, v in table.items() if k not in ("kind", "tie")}
    try:
        return reader.build(args, where)
    except SymjacError as exc:
        raise SpecError(f"{where}: {_toml_spelling(str(exc))}") from None
    except TypeError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _case(table: dict[str, Any], source: str, default_name: str) -> Case:
    name = _name(table.get("name", default_name), source)  # first: every message below names the case
    _check_keys(source, table, CASE_KEYS)
    if "operator" not in table:
        raise SpecError(f"{source}: missing the [operator] table")
    operator = _operator(table["operator"], f"{source} [operator]")
    tie = _tie(table["operator"], operator, f"{source} [operator]")
    is_loss = type(operator).__name__ == "Loss"
    valid_inputs = OPERATOR_TABLES[table["operator"]["kind"]].inputs
    raw = _check_keys(f"{source} [input]", table.get("input", {}), valid_inputs)
    inputs: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"{source} [input].{key}"
        if key == "shape":
            inputs[key] = tuple(value) if isinstance(value, list) else value
        elif key == "seed":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"{where}: {value!r} is not valid; give an integer >= 0")
            inputs[key] = value
        elif key == "generator":
            inputs[key] = value
        else:
            inputs[key] = exact_array(value, where)
    if not is_loss and "x" not in inputs and "shape" not in inputs and ({"dy", "generator"} & set(inputs)):
        # No input at all is fine: `symjac verify` then checks every shape of the coverage plan.
        raise SpecError(f"{source} [input]: give x (explicit values) or shape (with a generator)")
    if "generator" in inputs and "x" in inputs:
        raise SpecError(f"{source} [input]: give x or a generator, not both")
    if "generator" in inputs:
        from symjac.verifiers.pool._inputs import GENERATORS
        from symjac.verifiers.unpool._inputs import FINITE_FAMILIES

        valid = FINITE_FAMILIES if isinstance(operator, MaxUnpool) else GENERATORS
        if inputs["generator"] not in valid:
            raise SpecError(f"{source} [input].generator: {inputs['generator']!r} is not valid; give one of {', '.join(valid)}")
    expect = _check_keys(f"{source} [expect]", table.get("expect", {}), EXPECT_KEYS)
    return Case(name, operator, inputs, dict(expect), source, tie)


def _name(value: Any, source: str) -> str:
    """A case name, on one line: a control character (a newline, a tab, an escape) would
    split or garble the PASS/FAIL line and the report that name it."""
    name = str(value)
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Zl", "Zp")]
    if bad:
        file = source[:-len(name) - 1] if source.endswith(f"#{name}") else source  # (a [[case]]'s source holds it)
        raise SpecError(f"{file}: name = {name!r} holds the control character {bad[0]!r}; give a name on one line "
                        "without control characters")
    return name


def _tie(table: dict[str, Any], operator: Any, where: str) -> Any:
    """The ``tie`` key: a policy name or ``"beta:<b>"``, for max pooling only."""
    if "tie" not in table:
        return None
    if getattr(operator, "mode", None) != "max":
        raise SpecError(f"{where}.tie: only max pooling has ties; remove the key")
    from symjac.pool._beta import parse_tie
    from symjac.pool._symbolic import TIE_POLICIES

    try:
        return parse_tie(table["tie"], TIE_POLICIES)
    except SymjacError as exc:
        raise SpecError(f"{where}.{exc}") from None


def read_toml(path: str | Path, what: str = "spec file") -> tuple[Path, dict[str, Any]]:
    """Parse a TOML file.

    Raises:
      SpecError: the path is no readable file (missing, a broken or looping symbolic link, a
        directory, permission denied), not UTF-8 or not TOML; the message names the path and
        what would be valid.
    """
    p = Path(path)
    try:  # utf-8-sig: a leading byte-order mark is skipped, as most TOML tools do
        return p, tomllib.loads(p.read_text(encoding="utf-8-sig"))
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise SpecError(f"{p}: not valid TOML: arrays or tables nested too deeply for the parser") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{p}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise SpecError(unreadable(p, exc, what)) from None


def unreadable(p: Path, exc: OSError, what: str = "spec file") -> str:
    """Why the file ``p`` could not be read, in one line naming it and what would be valid."""
    give = f"give the path of a {what} (a TOML file) or of a link to one"
    if p.is_symlink():
        chain = [str(p)]
        hop = p
        while hop.is_symlink() and len(chain) < 8:
            hop = Path(os.path.normpath(hop.parent / os.readlink(hop)))
            if str(hop) in chain:
                return f"{p}: a symbolic link loop ({' -> '.join(chain + [str(hop)])}); {give}"
            chain.append(str(hop))
        if isinstance(exc, FileNotFoundError):
            return f"{p}: a symbolic link to {os.readlink(p)}, which does not exist; {give}"
    if isinstance(exc, FileNotFoundError):
        return f"{p}: no such {what}{nearest_file(p, '*.toml')}"
    if isinstance(exc, IsADirectoryError):
        return f"{p}: a directory, not a {what}; {give}"
    if isinstance(exc, PermissionError):
        return f"{p}: permission denied reading the {what}; {give} that you may read"
    if isinstance(exc, NotADirectoryError):
        return f"{p}: a part of the path before its last is a file, not a directory; {give}"
    if exc.errno == errno.ELOOP:
        return f"{p}: a symbolic link loop in the path; {give}"
    return f"{p}: cannot read the {what}: {exc.strerror or exc}; {give}"


def load(path: str | Path) -> SpecFile:
    """Read and validate a spec file.

    Raises:
      SpecError: the file is missing, not TOML, or has an unknown key or bad value;
        the message names the file and the key.
    """
    p, data = read_toml(path)
    try:
        return _load(p, data)
    except RecursionError:  # a value nested deeper than the reader's recursion (arrays of arrays of ...)
        raise SpecError(f"{p}: a value is nested too deeply; spec-file arrays have one level per axis") from None


def _load(p: Path, data: dict[str, Any]) -> SpecFile:
    _check_keys(str(p), data, TOP_KEYS)
    if "case" in data:
        if not isinstance(data["case"], list) or not all(isinstance(c, dict) for c in data["case"]):
            raise SpecError(f"{p}: case = {data['case']!r} is not valid; give [[case]] tables")
        extra = [k for k in data if k not in ("case", "name", "description")]
        if extra:
            raise SpecError(f"{p}: a file with [[case]] tables takes no top-level {extra[0]!r}; put it in each case")
        if not data["case"]:
            raise SpecError(f"{p}: case = [] holds no case; give at least one [[case]] table")
        cases = tuple(_case(c, f"{p}#{c.get('name', i)}", f"case {i}") for i, c in enumerate(data["case"]))
    else:
        cases = (_case(data, str(p), p.stem),)
    return SpecFile(p, cases)


def check_cases(cases: list[Case]) -> list[Case]:
    """The one validation of the operators of ``cases`` (each distinct one once), for an entry that
    takes cases (:func:`symjac.check_expect`, golden data): the stages below, :func:`pool_input`
    among them, take them as valid. A case read from a spec file holds a spec built (and so
    validated) by the reader.

    Raises:
      SpecError: an operator is neither a pooling spec, a :class:`symjac.MaxUnpool` nor a :class:`symjac.Loss`.
    """
    for is_loss, operator in dict.fromkeys((case.is_loss, case.operator) for case in cases):  # specs hash
        (check_loss if is_loss else check_unpool_spec if isinstance(operator, MaxUnpool) else check_pool_spec)(operator)
    return cases


def has_input(case: Case) -> bool:
    """The pooling case names its input (``[input] x`` or ``shape``)."""
    return "x" in case.inputs or "shape" in case.inputs


def plan_shape(spec: Any) -> tuple[int, ...]:
    """One small input shape for a case without ``[input]`` (``explain``, ``graph``): the shape of
    the coverage plan (:func:`symjac.cover`) with the most window classes (the smallest of those),
    with one batch and one channel; ``spec`` is valid (its case's entry checked it)."""
    from symjac.pool._cover import plan
    from symjac.pool._geometry import resolved
    from symjac.pool._symbolic import window_classes

    first = spec.layout == "channels_first"
    shapes = [(1, 1, *shape[2:]) if first else (1, *shape[1:-1], 1) for shape in plan(spec)]
    return max(shapes, key=lambda shape: (len(window_classes(resolved(spec, shape))), -int(np.prod(shape))))


def pool_input(case: Case, plan: bool = False, dtype: Any = None) -> tuple[Any, np.ndarray, np.ndarray]:
    """(geometry, x, dy) for a pooling case (its operator valid: :func:`check_cases`); generated
    where not explicit.

    ``x`` and ``dy`` are object arrays of exact Fractions. A case without ``[input]`` is
    refused, or with ``plan`` given the shape :func:`plan_shape` picks. With ``dtype``, the
    inputs as that dtype holds them: generated in it (a family's values are the dtype's own:
    ``near_ties`` are distinct in it, ``distinct`` ranks beyond its exact integers its
    consecutive values), explicit ones rounded to it (to nearest); without, generated in
    float64 and explicit ones as written.

    Raises:
      SpecError: the inputs do not fit the operator, or an explicit value is beyond ``dtype``'s
        range; the message names the file.
    """
    refuse_scatter(case.operator, case.source)
    if plan and not has_input(case):
        case = dataclasses.replace(case, inputs={**case.inputs, "shape": plan_shape(case.operator)})
    with named_by(case.source):
        return _pool_input(case, dtype)


def _pool_input(case: Case, dtype: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    from symjac._exact import ExactArray
    from symjac.check._rounding import float_dtype
    from symjac.pool._geometry import check_shape, resolved
    from symjac.verifiers.pool._inputs import generate_input, near_tie_dy, random_dyadic

    inputs = case.inputs
    seed = int(inputs.get("seed", 0))
    dt = float_dtype("float64" if dtype is None else dtype)
    if "x" not in inputs and "shape" not in inputs:
        raise SpecError(f"{case.source}: no [input] shape or x; `symjac verify` checks every shape of the coverage "
                        "plan then, but this needs one shape: add [input] shape = [...]")
    if "x" in inputs:
        x = inputs["x"]
        if "shape" in inputs and tuple(inputs["shape"]) != x.shape:
            raise SpecError(f"{case.source} [input]: shape {inputs['shape']} does not match x's shape {x.shape}")
        g = resolved(case.operator, check_shape(x.shape))
        x = x if dtype is None else held(x, dt, f"{case.source}: case {case.name!r} [input].x")
    else:
        g = resolved(case.operator, check_shape(inputs["shape"]))
        generator = inputs.get("generator", "distinct")
        x = ExactArray.from_any(generate_input(g, generator, dt, seed)).to_fractions()
    if "dy" in inputs:
        dy = inputs["dy"]
        if dy.shape != g.output_shape:
            raise SpecError(f"{case.source} [input].dy: shape {dy.shape}; the output shape is {g.output_shape}")
        dy = dy if dtype is None else held(dy, dt, f"{case.source}: case {case.name!r} [input].dy")
    else:
        # the near-ties family's own dy (near ties too, as symjac verify's pass has it: a backward
        # accumulating in a lower precision loses their low bits); else quarter-integers, exact anywhere
        near = "x" not in inputs and inputs.get("generator") == "near_ties"
        dy = (near_tie_dy(g, dt, seed) if near else random_dyadic(g, g.out_spatial, dt, seed))
        dy = ExactArray.from_any(dy).to_fractions()
    return g, x, dy


def held(values: np.ndarray, dtype: Any, where: str) -> np.ndarray:
    """Exact ``values`` (an object array of Fractions) as ``dtype`` holds them: each rounded to
    nearest, as Fractions again.

    Raises:
      SpecError: a value is beyond ``dtype``'s range (it would round to infinity).
    """
    from fractions import Fraction

    from symjac._exact import round_fractions
    from symjac.check._rounding import finfo, float_dtype

    dt = float_dtype(dtype)
    rounded = round_fractions(values, dt).astype(np.float64).reshape(-1)
    if not np.all(np.isfinite(rounded)):
        value = values.reshape(-1)[int(np.flatnonzero(~np.isfinite(rounded))[0])]
        raise SpecError(f"{where}: {magnitude(value)} is beyond the largest finite {dt.name} "
                        f"({float(finfo(dt).max):.6g}); give smaller values, or --dtype without {dt.name}")
    distinct = {r: Fraction(r) for r in set(rounded.tolist())}  # one Fraction per distinct value
    out = np.empty(values.size, dtype=object)
    out[:] = [distinct[r] for r in rounded.tolist()]
    return out.reshape(values.shape)
