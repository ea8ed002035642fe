"""tests/sampling.py and tests/conftest.py: the README's run draws a quarter of each property test's
examples, ``--run-slow`` all of them."""

import sampling


def test_the_run_knows_whether_it_is_the_full_one(request):
    assert sampling.FULL is bool(request.config.getoption("--run-slow"))


def test_a_quarter_at_least_ten_never_more_than_asked(monkeypatch):
    monkeypatch.setattr(sampling, "FULL", False)
    assert [sampling.examples(n) for n in (5, 15, 40, 150, 600)] == [5, 10, 10, 37, 150]
    monkeypatch.setattr(sampling, "FULL", True)
    assert [sampling.examples(n) for n in (5, 150)] == [5, 150]
