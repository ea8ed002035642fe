"""The ``symjac`` command line: argument parsing, the ``COMMANDS`` table, printing and exit
codes. The work it runs is the library's (``verifiers/``, ``frameworks/``, ``run/``); nothing
outside this folder but ``symjac.__main__`` and the console script imports it."""

from symjac.cli._main import main as main
