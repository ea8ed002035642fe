"""Execution services the command line and the library share: loading a user's
implementation (``--impl PATH.py:ATTR`` or ``module:ATTR``), running configurations in
this process, in worker processes or on a Dask cluster, and isolating calls in a worker
process so that a crash is a finding.

Nothing here imports a verifier or the command line: these modules sit below both.
"""
