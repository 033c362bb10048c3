"""Every Examples section in the package runs as a doctest."""

import doctest
import importlib
import pkgutil

import pytest

import salience
from salience.exceptions import MissingDependencyError

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(salience.__path__, "salience.") if not m.name.endswith(("_numba_kernels", "__main__"))
)


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    try:
        module = importlib.import_module(name)
    except MissingDependencyError as err:  # a module that is its extra (salience.server.models)
        pytest.skip(f"{name} needs an optional extra: {err}")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failed, missing = 0, []
    for test in doctest.DocTestFinder().find(module):
        test_failed, test_missing = _run(runner, test)
        if test_missing:  # the example needs an absent extra and its error names it: the contract holds
            missing.append(f"{test.name}: {test_missing}")
        else:
            failed += test_failed
    assert failed == 0, f"{failed} doctest(s) failed in {name}"
    if missing:
        pytest.skip(f"{name} has examples that need an optional extra: {missing[0]}")


def _run(runner, test):
    """(failures, the first MissingDependencyError's message or None) of one docstring's examples."""
    missing = []
    report = runner.report_unexpected_exception

    def note_missing(out, test, example, exc_info):
        if isinstance(exc_info[1], MissingDependencyError):
            missing.append(str(exc_info[1]))
        else:
            report(out, test, example, exc_info)

    runner.report_unexpected_exception = note_missing
    try:
        result = runner.run(test)
    finally:
        del runner.report_unexpected_exception
    return result.failed, (missing[0] if missing else None)
