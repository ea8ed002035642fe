"""The adapter protocol: an implementation under test as NumPy-in / NumPy-out callables.

Every framework module (:mod:`symjac.frameworks.torch`, ``jax``, ``tensorflow``,
``onnxruntime``) turns framework code into an :class:`Impl` and offers ready-made
pooling ops that return ``(spec, impl)``: the symjac spec the framework's documented
convention implies, and the framework's own op. A user adapter for another framework
needs only to build :class:`Impl` objects (see ``docs/frameworks.md``). :class:`Impl` and
:class:`LossImpl` are defined with the verifiers that read them (:mod:`symjac.verifiers._impl`,
below the adapters in the stack) and re-exported here.

Nothing here imports a framework: each module imports its framework lazily, inside
the function that needs it, through :func:`require`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from symjac._errors import SymjacError
from symjac.verifiers._impl import Impl as Impl, LossImpl as LossImpl

#: The pip extra that installs each framework module's dependencies.
EXTRAS = {"torch": "torch", "jax": "jax", "flax": "jax", "tensorflow": "tensorflow", "keras": "tensorflow",
          "onnx": "onnx", "onnxruntime": "onnx"}


class FrameworkMissing(SymjacError, ImportError):
    """A framework adapter was used but its framework is not installed; the message names the pip extra."""


class Unsupported(SymjacError, NotImplementedError):
    """The framework has no such op or convention (a documented limitation), or no VJP for it."""


class KnownDefect(str):
    """A framework defect an adapter documents (what its ``known_defect`` / ``known_loss_defect`` returns):
    the text (it is a ``str``) and the finding categories it produces.

    A conformance cell of the configuration is ``known:`` (not a finding) only when each of its
    findings is explained: its category is in ``categories`` and, for a defect of some input families
    only, it was found at one of ``families``. Any other finding is a failure, with this text beside
    it. A plain string returned instead documents a defect of any category (the old form).

    Attributes:
      categories: the finding categories it produces (:data:`symjac.check._report.CATEGORIES`;
        ``"crashed"`` / ``"timeout"`` for a crash or a hang).
      families: the input families whose findings it is (``nonfinite``: its NaN handling; ``extreme``:
        an overflow), or () for any: a defect of some families only leaves the configuration's
        verdict at the others to be checked.
      scopes: ``(categories, families)`` of each defect it holds (:func:`combine` keeps each one's
        own): a finding is explained by a scope holding its category and its family (or no family).

    Raises:
      SymjacError: no categories, or one that is not a finding category.
    """

    categories: tuple[str, ...]
    families: tuple[str, ...]
    scopes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]

    def __new__(cls, text: str, categories: Sequence[str], families: Sequence[str] = (),
                scopes: Sequence[tuple[Sequence[str], Sequence[str]]] | None = None) -> KnownDefect:
        from symjac.check._report import CATEGORIES

        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown or not categories:
            raise SymjacError(f"KnownDefect categories {list(categories)!r}: give one or more of "
                              f"{', '.join(CATEGORIES)}")
        self = super().__new__(cls, text)
        self.categories = tuple(categories)
        self.families = tuple(families)
        self.scopes = tuple((tuple(c), tuple(f)) for c, f in scopes) if scopes is not None else \
            ((self.categories, self.families),)
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    def explains(self, category: str, family: str | None) -> bool:
        """Whether a finding of ``category`` at input ``family`` is this documented defect."""
        return explained(self.scopes, category, family)

    def __getnewargs__(self) -> tuple[Any, ...]:
        return self.text, self.categories, self.families, self.scopes


def explained(scopes: Sequence[Sequence[Sequence[str]]], category: str, family: str | None) -> bool:
    """Whether ``(categories, families)`` ``scopes`` (:attr:`KnownDefect.scopes`, or a cell's
    ``known_scopes``) hold a finding of ``category`` at input ``family`` (no families: any)."""
    return any(category in cats and (not fams or family in fams) for cats, fams in scopes)


def combine(defects: Sequence[KnownDefect]) -> KnownDefect | None:
    """Several documented defects of one configuration as one: their texts, the union of their
    categories and families (() as soon as one holds at any family), and each one's own scope."""
    if not defects:
        return None
    families = () if any(not d.families for d in defects) else tuple(dict.fromkeys(f for d in defects
                                                                                for f in d.families))
    return KnownDefect("; and: ".join(defects), tuple(dict.fromkeys(c for d in defects for c in d.categories)),
                       families, [scope for d in defects for scope in d.scopes])


def known_fields(defect: Any) -> dict[str, Any]:
    """A cell's fields for an adapter's documented defect: ``known_defect`` (its text) and
    ``known_categories`` and ``known_scopes`` (a :class:`KnownDefect`'s; absent for a string: any
    category); none for None."""
    if not defect:
        return {}
    if isinstance(defect, KnownDefect):
        return {"known_defect": defect.text, "known_categories": list(defect.categories),
                "known_scopes": [[list(c), list(f)] for c, f in defect.scopes]}
    return {"known_defect": str(defect)}


@dataclasses.dataclass(frozen=True)
class Config:
    """One point of a framework's convention matrix.

    Attributes:
      op: name of the ready-made op in the framework module.
      kwargs: its arguments.
      input_shape: the full input shape, in the framework's layout; ``()`` or None (a user adapter's
        configuration may leave it out): ``conform`` runs it at every shape of the coverage plan
        (:func:`symjac.cover` of the spec ``make`` returns).
      label: a short human label of the convention, e.g. ``"k3 s2 p1 ceil"`` (empty: the op and
        its arguments).
    """

    op: str
    kwargs: Mapping[str, Any]
    input_shape: tuple[int, ...] = ()
    label: str = ""


def require(name: str) -> ModuleType:
    """Import framework module ``name``, or raise :class:`FrameworkMissing` naming the pip extra."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        extra = EXTRAS.get(name.split(".")[0], name)
        raise FrameworkMissing(
            f"{name} is not installed (symjac.frameworks needs it for this adapter): "
            f"pip install 'symjac[{extra}]'"
        ) from exc


def make(module: ModuleType, config: Config) -> tuple[Any, Impl]:
    """Build ``(spec, impl)`` of ``config`` with the ready-made op of framework module ``module``."""
    op: Callable[..., tuple[Any, Impl]] = getattr(module, config.op)
    return op(**config.kwargs)


def call_text(func: str, kwargs: Mapping[str, Any], first: str = "") -> str:
    """``func(first, k=v, ...)`` with ``repr`` values: one line of a reproducer."""
    args = ([first] if first else []) + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{func}({', '.join(args)})"


#: Configurations per grid: ``"small"`` for a quick conformance run, ``"full"`` for hundreds.
GRID_SIZES = {"small": 36, "full": 360}


def grid_size(grid: str) -> int:
    """Number of configurations of ``grid``; a clear error for an unknown grid."""
    if grid not in GRID_SIZES:
        raise SymjacError(f"grid={grid!r} is not valid: give one of {', '.join(map(repr, GRID_SIZES))}")
    return GRID_SIZES[grid]


def generate(grid: str, families: list[Callable[[np.random.Generator], Config | None]],
             build: Callable[[Config], tuple[Any, Impl]], seed: int = 9, scale: int = 1) -> Iterator[Config]:
    """Seeded, deterministic configurations: cycle through ``families``, each drawing one candidate.

    A candidate the framework rejects (``build`` raises) or whose spec has no valid geometry at its
    input shape (a window reading only padding, an extent longer than the padded input) is drawn
    again, as is a duplicate, so every configuration yielded is distinct and one the framework
    documents as valid (a family that runs out of new configurations yields fewer). ``scale`` multiplies the grid's size.
    """
    from symjac.pool._geometry import resolve

    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    for i in range(grid_size(grid) * scale):
        family = families[i % len(families)]
        for _ in range(1000):
            config = family(rng)
            if config is None or repr(config) in seen:
                continue
            try:
                spec, _ = build(config)
                resolve(spec, config.input_shape)
            except (SymjacError, ValueError):
                continue
            seen.add(repr(config))
            yield config
            break
        # else: the family has no new valid configuration left (a small one, e.g. global pools): skip it


def label(op: str, **parts: Any) -> str:
    """A short convention label: ``label("max_pool2d", k=3, s=2, ceil=True)`` → ``"max_pool2d k3 s2 ceil"``."""
    words = [op]
    for key, value in parts.items():
        if value is True:
            words.append(key)
        elif value is not False and value is not None:
            text = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
            words.append(f"{key}{text}")
    return " ".join(words)
