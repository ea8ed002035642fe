"""symjac: prove that a layer's backward pass is the exact derivative of its forward.

SymPy builds the exact forward expression of every pooling window and loss, derives
the exact Jacobian once per window class, and lowers it to NumPy; a window graph
and colouring probes check an implementation's backward against it.

Public names are imported lazily (PEP 562), so ``import symjac`` and the pytest
plugin stay light: SymPy loads only when an engine function is first used.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from ._errors import InputError as InputError, SpecError as SpecError, SymjacError as SymjacError, VerificationError as VerificationError

__version__ = "0.1.0"

_EXPORTS = {
    "Pool": "spec",
    "AdaptivePool": "spec",
    "GlobalPool": "spec",
    "Geometry": "geometry",
    "resolve": "geometry",
    "SparseJacobian": "jacobian",
    "expressions": "jacobian",
    "forward": "jacobian",
    "jacobian": "jacobian",
    "tie_sets": "jacobian",
    "vjp": "jacobian",
    "Lowered": "lowering",
    "lower": "lowering",
    "probe_plan": "graph",
    "window_graph": "graph",
    "Finding": "report",
    "Report": "report",
    "verify": "verify",
    "Loss": "losses",
    "loss_value": "losses",
    "loss_derivative": "losses",
    "loss_derivative_set": "losses",
    "verify_loss": "verify_loss",
    "check_loss_family": "verify_loss",
    "LossImpl": "verify_loss",
    "FamilyTable": "verify_loss",
    "load_spec_file": "specfile",
}
_SUBMODULES = ("cli", "exact", "explain", "geometry", "golden", "graph", "inputs", "jacobian", "losses", "lowering",
               "picture", "report", "spec", "specfile", "sweep", "symbolic", "testing", "verify", "verify_loss")

__all__ = sorted(["InputError", "SpecError", "SymjacError", "VerificationError", "testing", *_EXPORTS])


class _Package(types.ModuleType):
    """Keep ``symjac.verify`` and ``symjac.verify_loss`` the functions once their submodules load.

    After loading a submodule the import system sets ``symjac.<name> = <module>``; where
    the submodule shares its name with its main export, that would shadow the function
    for every later ``from symjac import ...``. Bind the function instead
    (``from symjac.verify_loss import ...`` still reaches the module via sys.modules).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        value = getattr(module, "load" if name == "load_spec_file" else name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'symjac' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
