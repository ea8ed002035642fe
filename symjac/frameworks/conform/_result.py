"""The outcome of a conformance run: :class:`Conformance`, its table, JSON and reproducers.

The table has the pooling configurations' rows (one column per transform and dtype) and, when
the adapter has losses, a second block of loss rows (the transforms that apply to a loss:
``vjp`` the derivative, ``hvp`` the Hessian-vector product). A cell is ``pass``, the root
finding category, ``known:CATEGORY`` (a defect the adapter documents, still reproducing: not a
finding; only when every category of the cell's findings is among those the adapter gives for it,
:class:`symjac.frameworks.KnownDefect`, else the cell is a finding with the known text beside it), ``fixed?`` (a documented defect that passed here), ``unsupported``, ``skipped``,
``error`` or ``-`` (not run).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from symjac.frameworks.conform._loss import LOSS_TRANSFORMS, NOT_APPLICABLE
from symjac.frameworks.conform._plan import numpy_dtype
from symjac.frameworks.conform.reproducers._write import write_reproducer

#: Statuses of a cell; "finding" cells carry the root category, "known_defect" cells too (a
#: finding in a configuration whose defect the adapter documents).
STATUSES = ("pass", "finding", "known_defect", "unsupported", "skipped", "error", "not_run")
#: The table's text of a cell symjac could not run for want of a package (``not_run`` with ``missing``).
MISSING_TEXT = "not run: {} missing"
#: The table's text of a cell whose documented defect did not show.
FIXED_TEXT = "fixed?"


def _row(config: dict[str, Any]) -> str:
    row = f"{config['label']} @{'x'.join(map(str, config['input_shape']))}"
    return f"{row} #{config['index']}" if config.get("loss") else row


def _short(framework: str) -> str:
    return Path(framework.split(":")[0]).stem


def _transform(r: dict[str, Any]) -> str:
    return str(r["config"].get("transform", "vjp"))


def _compiled(r: dict[str, Any]) -> bool:
    return bool(r["config"].get("compiled"))


@dataclasses.dataclass
class Conformance:
    """The outcome of a conformance run.

    Attributes:
      framework: what was run (``"torch"`` or an adapter target).
      grid: ``"small"`` or ``"full"``.
      dtypes: the dtypes, in column order.
      results: one dict per (configuration, dtype, transform): ``config`` (the job; ``loss: True``
        for a loss configuration), ``dtype``, ``status`` (:data:`STATUSES`), ``category`` for
        findings and known defects, ``known_defect`` (the adapter's text) where one is documented,
        ``known_categories`` (its categories; absent for a string: any), ``known_unexplained`` (a
        finding's categories the documented defect does not have: the cell is a finding),
        ``known_defect_fixed`` when it did not show, ``summary``/``reason``.
      seconds: wall time.
      transforms: the derivatives checked (:data:`symjac.frameworks.conform._transforms.TRANSFORMS`), one
        column each (per dtype); a result's job says its ``transform``, the result too.
      modes: ``"eager"`` and/or ``"compiled"`` (:mod:`symjac.frameworks.conform._modes`): a column per
        transform each; a compiled cell's job has ``compiled: True``, and every result its ``mode``, the
        mode its callables ran in (``"eager"``, ``"tf.function"``, ...).
      compiled_mode: the compiled mode's name, in the compiled columns' heads (``jvp@tf.function``).
    """

    framework: str
    grid: str
    dtypes: tuple[str, ...]
    results: list[dict[str, Any]]
    seconds: float
    transforms: tuple[str, ...] = ("vjp",)
    modes: tuple[str, ...] = ("eager",)
    compiled_mode: str = "compiled"

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The new failures: cells with a finding no documented defect explains."""
        return [r for r in self.results if r["status"] == "finding"]

    @property
    def known(self) -> list[dict[str, Any]]:
        """The cells whose documented (known) defect still reproduces."""
        return [r for r in self.results if r["status"] == "known_defect"]

    @property
    def fixed(self) -> list[dict[str, Any]]:
        """The cells of a documented defect that passed (fixed, or not reached by these inputs)."""
        return [r for r in self.results if r["status"] == "pass" and r.get("known_defect_fixed")]

    @property
    def verified(self) -> int:
        """How many cells were verified (passed, had a finding or reproduced a known defect)."""
        return sum(r["status"] in ("pass", "finding", "known_defect") for r in self.results)

    @property
    def ok(self) -> bool:
        """True when no cell has a new finding (known defects, unsupported, skipped and not-run cells are none)."""
        return not self.findings

    def counts(self) -> dict[str, int]:
        return {s: sum(r["status"] == s for r in self.results) for s in STATUSES}

    def cell_text(self, r: dict[str, Any]) -> str:
        if r["status"] in ("finding", "known_defect"):
            text = f"{r['category']}:{r['signal']}" if r.get("signal") else str(r["category"])
            return f"known:{text}" if r["status"] == "known_defect" else text
        if r["status"] == "not_run":
            return MISSING_TEXT.format(r["missing"]) if r.get("missing") else "-"
        if r.get("known_defect_fixed"):
            return FIXED_TEXT
        return str(r["status"])

    def _block(self, results: list[dict[str, Any]], transforms: tuple[str, ...], head: str) -> list[str]:
        rows: dict[str, dict[str, str]] = {}
        for r in results:
            rows.setdefault(_row(r["config"]), {})[self._column(r["dtype"], _transform(r), _compiled(r))] = \
                self.cell_text(r)
        modes = [m == "compiled" for m in self.modes] if results and not results[0]["config"].get("loss") else [False]
        heads = [self._column(d, t, c) for d in self.dtypes for t in transforms for c in modes]
        width = max([len(head)] + [len(k) for k in rows])
        cols = [max(len(d), *(len(v.get(d, "")) for v in rows.values())) for d in heads] if rows else []
        lines = [f"{head:{width}}  " + "  ".join(f"{d:{w}}" for d, w in zip(heads, cols))]
        for label, cells in rows.items():
            lines.append(f"{label:{width}}  " + "  ".join(f"{cells.get(d, ''):{w}}" for d, w in zip(heads, cols)))
        return lines

    def _summary(self, results: list[dict[str, Any]], transforms: tuple[str, ...], what: str) -> str:
        configs = len({_row(r["config"]) for r in results})
        counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
        per = "" if transforms == ("vjp",) else f" x {len(transforms)} transforms"
        if len(self.modes) > 1 and not (results and results[0]["config"].get("loss")):
            per += f" x {len(self.modes)} modes"
        return (f"{what}: {configs} configurations x {len(self.dtypes)} dtypes{per} = {len(results)} cells: "
                + ", ".join(f"{v} {k}" for k, v in counts.items() if v))

    def table(self) -> str:
        """op × convention rows, one column per dtype (per transform); loss rows in a second block."""
        pools = [r for r in self.results if not r["config"].get("loss")]
        losses = [r for r in self.results if r["config"].get("loss")]
        loss_transforms = tuple(t for t in self.transforms if t in LOSS_TRANSFORMS)
        lines = self._block(pools, self.transforms, "configuration") if pools or not losses else []
        if losses:
            lines += ([""] if lines else []) + self._block(losses, loss_transforms, "loss")
        absent = [t for t in self.transforms if t not in LOSS_TRANSFORMS]
        if losses and absent:
            lines.append(f"{NOT_APPLICABLE}: no loss cells for {', '.join(absent)} (a loss's derivative is checked "
                         "as vjp, its second derivative as hvp)")
        if losses and "compiled" in self.modes:
            lines.append(f"{NOT_APPLICABLE}: no loss cells in {self.compiled_mode} (the losses run eagerly only)")
        for r in self.known:
            note = f"known: a defect the adapter documents, reproduced (not a finding): {r['known_defect']}"
            if note not in lines:
                lines.append(note)
        for r in self.findings:
            if r.get("known_defect"):
                note = (f"not known: {', '.join(r['known_unexplained'])} is not among the categories "
                        f"({', '.join(r['known_categories'])}) of the defect the adapter documents for "
                        f"{r['config']['label']}: {r['known_defect']}")
                if note not in lines:
                    lines.append(note)
        for r in self.fixed:
            note = (f"{FIXED_TEXT} a documented defect that did not reproduce (fixed, or not reached by these "
                    f"inputs): {r['known_defect']}")
            if note not in lines:
                lines.append(note)
        missing = {str(r["missing"]): str(r["reason"]) for r in self.results if r["status"] == "not_run"
                   and r.get("missing")}
        lines += [f"{MISSING_TEXT.format(package)}: {reason}" for package, reason in missing.items()]
        summaries = []
        if pools or not losses:
            summaries.append(self._summary(pools, self.transforms, f"{self.framework} --grid {self.grid}"))
        if losses:
            summaries.append(self._summary(losses, loss_transforms, "losses" if pools else
                                           f"{self.framework} --grid {self.grid} losses"))
        summaries[-1] += f" in {self.seconds:.1f} s"
        return "\n".join(lines + summaries)

    def _column(self, dtype: str, transform: str, compiled: bool = False) -> str:
        """A column's head: the dtype (an eager VJP-only run, as before transforms), else ``transform/dtype``,
        ``transform@mode/dtype`` for the compiled mode's."""
        if self.transforms == ("vjp",) and self.modes == ("eager",):
            return dtype
        return f"{transform}@{self.compiled_mode}/{dtype}" if compiled else f"{transform}/{dtype}"

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        from symjac.check._report import jsonable

        return {"framework": self.framework, "grid": self.grid, "dtypes": list(self.dtypes),
                "transforms": list(self.transforms), "modes": list(self.modes), "compiled_mode": self.compiled_mode,
                "ok": self.ok,
                "seconds": round(self.seconds, 3), "counts": self.counts(),
                "failure_classes": [list(k) for k in self.failure_classes()],
                "results": [jsonable({k: v for k, v in r.items() if k != "reproducer"})
                            for r in self.results]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def failure_classes(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(op, category) -> the first cell with that finding or known defect (a transform's category
        is ``transform:category``, in the compiled mode ``transform@mode:category``; a known defect's
        ``known:...``)."""
        classes: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.results:
            if r["status"] not in ("finding", "known_defect"):
                continue
            transform = _transform(r)
            if _compiled(r):
                transform = f"{transform}@{r.get('mode') or self.compiled_mode}"
            category = r["category"] if transform == "vjp" else f"{transform}:{r['category']}"
            if r["status"] == "known_defect":
                category = f"known:{category}"
            classes.setdefault((r["config"]["op"], category), r)
        return classes

    def write_reproducers(self, directory: str | Path) -> list[Path]:
        """For every distinct failure class (known defects included), a spec file (TOML, pools only)
        and a Python script; returns the paths."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for (op, category), r in self.failure_classes().items():
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{_short(self.framework)}-{op}-{category}")
            written += write_reproducer(out, stem, self.framework, r, numpy_dtype(r["dtype"]))
        return written
