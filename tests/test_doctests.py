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
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
