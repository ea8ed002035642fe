"""Verify a spec-file case (pooling or loss) against an implementation object.

The one place the command line (``symjac verify``, ``graph --impl``) and the pytest
fixture ``symjac_case`` turn an implementation object and a case into a call of
:func:`symjac.verify` or :func:`symjac.verify_loss`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.check._call import DEFAULT_TIMEOUT
from symjac.verifiers._impl import implementation


def case_callables(impl: Any, case: Any) -> dict[str, Any]:
    """The ``backward``/``forward`` (pooling) or ``derivative``/``forward`` (loss) of
    ``impl`` for ``case``.

    ``impl`` is an object or dict with those entries, or one holding an attribute
    named after the case (a family of implementations, as seed 003's losses); a
    ``torch.autograd.Function`` subclass is called through its ``apply``, as
    :func:`symjac.frameworks.torch.wrap` calls it.

    Raises:
      InputError: the needed callable is missing; the message lists the
        implementations found in a module.
    """
    holder = getattr(impl, case.name, impl) if case.name.isidentifier() else impl
    return implementation(holder, loss=case.is_loss,
                          what=f"for the {'loss' if case.is_loss else 'pooling'} case {case.name!r}")


def verify_case(case: Any, impl: Any, dtype: str, timeout: float | None = DEFAULT_TIMEOUT,
                deterministic: bool = False, large: bool = False) -> Any:
    """The :class:`symjac.Report` of ``impl`` on ``case`` at the case's inputs, in ``dtype``
    (a pooling case without ``[input]``: at every shape of its coverage plan, with
    ``large`` its index-width shapes too), each call of the implementation limited to
    ``timeout`` seconds (None: no limit); ``deterministic`` as :func:`symjac.verify`'s
    (a bitwise difference between equal calls is a finding)."""
    from symjac.io._specfile import pool_input

    fns = case_callables(impl, case)
    if case.is_loss:
        from symjac.verifiers.loss._verify import verify_loss

        inputs = {k: np.array(case.inputs[k], dtype=np.float64) if k in case.inputs else None
                  for k in ("pred", "label", "upstream")}
        return verify_loss(case.operator, derivative=fns["derivative"], forward=fns["forward"],
                           pred=inputs["pred"], label=inputs["label"], upstream=inputs["upstream"], dtype=dtype,
                           timeout=timeout, deterministic=deterministic)
    from symjac.verifiers.pool._verify import verify

    seed = int(case.inputs.get("seed", 0))
    if "x" not in case.inputs and "shape" not in case.inputs:  # no [input]: the coverage plan
        return verify(case.operator, **fns, dtype=dtype, seed=seed, timeout=timeout, tie=case.tie or "any",
                      deterministic=deterministic, large=large)
    _, x, dy = pool_input(case)
    explicit = "x" in case.inputs
    return verify(case.operator, **fns, x=x.astype(np.float64) if explicit else None,
                  input_shape=None if explicit else x.shape,
                  dy=dy.astype(np.float64) if "dy" in case.inputs else None, dtype=dtype,
                  seed=seed, timeout=timeout, tie=case.tie or "any", deterministic=deterministic)
