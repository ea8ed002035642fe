"""Loading a user's implementation object: ``MODULE_OR_PATH[:ATTR]`` (``--impl``).

Shared by every subcommand, by sweep workers (which load it in their own process) and by
``conform`` (a user adapter ``PATH:ATTR``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from symjac._errors import UsageError, nearest_file


def impl_candidates(holder: Any, needed: tuple[str, ...] = ("backward", "derivative")) -> list[str]:
    """Public attributes of a module that look like implementations: objects (or
    dicts) with one of ``needed``."""
    names = []
    for name in sorted(vars(holder)) if isinstance(holder, types.ModuleType) else ():
        obj = getattr(holder, name)
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if any((k in obj) if isinstance(obj, dict) else hasattr(obj, k) for k in needed):
            names.append(name)
    return names


def load_impl(target: str) -> Any:
    """``MODULE_OR_PATH[:ATTR]`` -> the object (or module) holding the callables.

    A file is imported with its folder first on ``sys.path`` (while it loads), so that it
    imports its sibling modules without ``PYTHONPATH``.

    Raises:
      UsageError: no such file or module, its import failed (or called ``sys.exit``), or
        it has no attribute ``ATTR``; the message names the target and the nearest name.
    """
    module_part, _, attr = target.partition(":")
    if not module_part:
        raise UsageError(f"--impl {target!r}: give MODULE_OR_PATH:ATTR, e.g. mypkg.pool:impl or impls.py:impl")
    path = Path(module_part)
    try:
        if module_part.endswith(".py") or path.exists():
            if not path.is_file():
                raise UsageError(f"--impl {target!r}: no such file {module_part}{nearest_file(path, '*.py')}")
            name = f"_symjac_impl_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise UsageError(f"--impl {target!r}: cannot load {module_part} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            folder = str(path.resolve().parent)
            added = folder not in sys.path
            if added:  # its sibling modules import as they would for `python impls.py`
                sys.path.insert(0, folder)
            try:
                spec.loader.exec_module(module)
            finally:
                if added and folder in sys.path:
                    sys.path.remove(folder)
        else:
            module = importlib.import_module(module_part)
    except UsageError:
        raise
    except SystemExit as exc:  # would otherwise end symjac with the module's code: exit 0 and no verdict
        raise UsageError(f"--impl {target!r}: importing {module_part} called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        raise UsageError(f"--impl {target!r}: importing {module_part} failed: {type(exc).__name__}: {exc}") from None
    if not attr:
        return module
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            near = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=1)
            hint = f"; did you mean {module_part}:{attr.replace(part, near[0], 1)}?" if near else ""
            found = impl_candidates(module)
            listing = f" (implementations found: {', '.join(found)})" if found and not near else ""
            raise UsageError(f"--impl {target!r}: {module_part} has no attribute {attr!r}{hint}{listing}")
        obj = getattr(obj, part)
    return obj
