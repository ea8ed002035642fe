"""The native routes: ``process`` (a program answering requests on stdin/stdout), ``ctypes`` (a shared
library's C ABI), both sending ``_calls`` over ``_wire``'s protocol (``_child`` runs the program, ``_stderr``
keeps the line of its stderr that says what went wrong) as poisoned runs (``_poison``: what the kernel did not write), and ``_offline`` (probes recorded, answered
elsewhere, checked). ``symjac.frameworks.process``, ``.ctypes`` and ``._offline`` are their documented
import paths."""
