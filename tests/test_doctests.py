"""Every Examples section in the package runs as a doctest."""

import doctest
import importlib
import pkgutil

import pytest

import salience

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(salience.__path__, "salience.") if not m.name.endswith(("_numba_kernels", "__main__"))
)


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
