"""The pooling operators: one definition per mode, and the registry every stage looks them up in.

Each module here defines one operator (:class:`~symjac.pool._ops._protocol.Operator`):
``avg``, ``max``, ``lp``, ``fractional_max`` (max pooling's rules on
:class:`symjac.FractionalMaxPool`'s windows). A stage finds the rules of a spec's operator with
:func:`operator_of` (or ``geometry.operator``) and reads them; the modules of this
package are the only places that name an operator. Adding one is a module here, one
line in :data:`OPERATORS`, and its tests (CONTRIBUTING.md, "Add a pooling operator").
"""

from __future__ import annotations

from typing import Any

from symjac.pool._ops._protocol import Operator
from symjac.pool._ops.align_max import ROI_ALIGN_MAX
from symjac.pool._ops.avg import AVG
from symjac.pool._ops.fractional_max import FRACTIONAL_MAX
from symjac.pool._ops.lp import LP
from symjac.pool._ops.max import MAX
from symjac.pool._ops.roi_align import ROI_ALIGN
from symjac.pool._ops.roi_pool import ROI_POOL

#: Every registered pooling operator by name, in the order error messages list them.
OPERATORS: dict[str, Operator] = {op.name: op for op in (MAX, AVG, LP, FRACTIONAL_MAX, ROI_ALIGN, ROI_ALIGN_MAX, ROI_POOL)}


def operator_of(spec_or_mode: Any) -> Operator:
    """The operator of a pooling spec (or of a mode name): a dict lookup."""
    mode = spec_or_mode if isinstance(spec_or_mode, str) else spec_or_mode.mode
    return OPERATORS[mode]


__all__ = ["OPERATORS", "Operator", "operator_of"]
