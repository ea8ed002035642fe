"""symjac: prove that a layer's backward pass is the exact derivative of its forward.

SymPy builds the exact forward expression of every pooling window and loss, derives
the exact Jacobian once per window class, and lowers it to NumPy; a window graph
and colouring probes check an implementation's backward against it.

Public names are imported lazily (PEP 562), so ``import symjac`` and the pytest
plugin stay light: SymPy loads only when an engine function is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._errors import InputError as InputError, SpecError as SpecError, SymjacError as SymjacError, VerificationError as VerificationError

from ._version import __version__ as __version__

_EXPORTS = {
    # pooling: specs and the exact engine
    "Pool": "pool._spec",
    "AdaptivePool": "pool._spec",
    "GlobalPool": "pool._spec",
    "FractionalMaxPool": "pool._spec",
    "MaxUnpool": "pool._ops.unpool",
    "RoiAlign": "pool._spec",
    "RoiPool": "pool._spec",
    "Beta": "pool._beta",
    "Geometry": "pool._geometry",
    "resolve": "pool._geometry",
    "SparseJacobian": "pool._stamp",
    "expressions": "pool._jacobian",
    "forward": "pool._jacobian",
    "jacobian": "pool._jacobian",
    "tie_sets": "pool._jacobian",
    "vjp": "pool._jacobian",
    "in_clarke_set": "pool._clarke",
    "tie_census": "pool._census",
    "Census": "pool._census",
    "cover": "pool._cover",
    "Lowered": "pool._lowering",
    "lower": "pool._lowering",
    "probe_plan": "pool._graph",
    "window_graph": "pool._graph",
    # losses
    "Loss": "loss._spec",
    "loss_value": "loss._evaluate",
    "loss_derivative": "loss._evaluate",
    "loss_derivative_set": "loss._evaluate",
    "default_loss_inputs": "loss._evaluate",
    "loss_hessian": "loss._hessian",
    "loss_hvp": "loss._hessian",
    # verification
    "Finding": "check._report",
    "Report": "check._report",
    "verify": "verifiers.pool._verify",
    "verify_loss": "verifiers.loss._verify",
    "check_loss_family": "verifiers.loss._family",
    "LossImpl": "verifiers._impl",
    "FamilyTable": "verifiers.loss._family",
    "infer": "verifiers.pool._infer",
    "conform": "frameworks.conform._run",
    "Conformance": "frameworks.conform._run",
    # files
    "load_spec_file": "io._specfile",
    "check_expect": "io.golden._write",
}
_ALIASES = {"load_spec_file": "load", "default_loss_inputs": "default_inputs"}
_SUBMODULES = ("testing", "frameworks")

__all__ = sorted(["InputError", "SpecError", "SymjacError", "VerificationError", "__version__", *_SUBMODULES,
                  *_EXPORTS])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        value = getattr(module, _ALIASES.get(name, name))
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'symjac' has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(__all__)
