"""verify_loss's extra input families, beyond its inputs: which run, each one's calls, the words they leave.

The families are the kinds' (:mod:`symjac.loss._families`): ``extreme``
(:mod:`symjac.verifiers.loss._extreme`) and ``nonfinite``
(:mod:`symjac.verifiers.loss._nonfinite`). Each makes one derivative call and one forward
call at its own inputs (built in the dtype of the verification, the loss's options and
reduction included); its findings carry the family's name (``finding.family``) and say where
they were found, and ``stats["families"]`` holds each one's figures (the policy seen at
non-finite predictions, the extreme inputs' reach).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._report import Finding
from symjac.loss._domain import FAMILIES
from symjac.loss._domain import index as _index
from symjac.loss._families import NAMES, Nonfinite, families_of, family_inputs
from symjac.loss._spec import Loss
from symjac.verifiers.loss._extreme import check_extreme
from symjac.verifiers.loss._inputs import prepare_inputs
from symjac.verifiers.loss._nonfinite import check_nonfinite


def family_names(loss: Loss, families: Sequence[str] | None, defaults: bool) -> tuple[str, ...]:
    """The extra families to run: the kind's at the default inputs (``defaults``), else the ones given.

    Raises:
      InputError: ``families`` is not a sequence of :data:`symjac.loss._domain.FAMILIES`.
    """
    if families is None:
        return families_of(loss) if defaults else ()
    if isinstance(families, str) or not all(f in FAMILIES for f in families):
        raise InputError(f"families={families!r} is not valid: give a sequence of {', '.join(map(repr, FAMILIES))} "
                         "(or () for none)")
    return tuple(dict.fromkeys(families))


def run_families(loss: Loss, names: tuple[str, ...], derivative: Callable[..., Any],
                 forward: Callable[..., Any] | None, dt: np.dtype[Any],
                 timeout: float | None) -> tuple[list[Finding], dict[str, Any]]:
    """Each family's calls and checks: its findings (tagged) and its figures, by name."""
    findings: list[Finding] = []
    ran: dict[str, Any] = {}
    for name in names:
        inputs = family_inputs(loss, name, dt)
        if inputs is None:
            ran[name] = f"none: {loss.kind}'s float evaluation overflows only where its exact value does"
            continue
        if name == "extreme":
            got, ran[name] = check_extreme(loss, derivative, forward, inputs, dt, timeout)
            said = f"at extreme-magnitude inputs ({ran[name]['inputs']})"
        else:
            p0, l0, u0, _ = prepare_inputs(loss, *inputs, dt)
            split = Nonfinite.of(loss, p0)
            assert split is not None, "the nonfinite family holds non-finite predictions"
            got, more, _, _, _ = check_nonfinite(loss, derivative, forward, p0, l0, u0, dt, timeout, split)
            ran[name] = {**more.pop("nonfinite"), **more}  # entries, reached, policy, convention; the values' figures
            said = f"at non-finite predictions ({placed(split)})"
        findings += [dataclasses.replace(f, family=name, message=f"{said}: {f.message}") for f in got]
    return findings, ran


def placed(split: Nonfinite) -> str:
    """Where the non-finite values sit: ``nan at pred[0, 1], inf at pred[1, 0]``."""
    flat = split.codes.reshape(-1)
    return ", ".join(f"{NAMES[int(flat[j])]} at pred{_index(split.codes.shape, int(j))}" for j in np.flatnonzero(flat))


def policy_text(policy: dict[str, dict[str, str]]) -> str:
    """The policies seen (``stats["nonfinite"]["policy"]``), as a headline says them:
    ``derivative nan at nan, limit at inf``."""
    parts = []
    for role, seen in policy.items():
        parts.append(f"{role} " + ", ".join(f"{how.replace('+', ' or ')} at {what}" for what, how in seen.items()))
    return "; ".join(parts) or "nothing called"


def families_text(ran: dict[str, Any]) -> str:
    """What a headline says of families that passed."""
    parts = []
    for name, got in ran.items():
        if isinstance(got, str):
            continue
        if name == "extreme":
            parts.append("extreme magnitudes skipped (an exact derivative there beyond the dtype's range)"
                         if "skipped" in got else f"right at extreme magnitudes ({got['inputs']})")
        else:
            parts.append(f"at NaN/±inf predictions: {policy_text(got['policy'])}")
    return "; ".join(parts)
