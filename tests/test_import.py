import subprocess
import sys

import pytest

import salience


def test_import_is_light():
    code = (
        "import sys, salience\n"
        "allowed_roots = {'numpy', 'scipy', 'salience'}\n"
        "heavy = ['torch', 'numba', 'tqdm', 'Stemmer', 'pandas', 'sklearn', 'ray', 'fastapi', 'matplotlib', 'transformers']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_top_level_loads_only_stdlib_numpy_scipy():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import salience\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "stdlib = set(sys.stdlib_module_names)\n"
        "print(sorted(r for r in new if r not in stdlib and not r.startswith('_') and r not in {'numpy', 'scipy', 'salience'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_attributes():
    assert salience.BM25 is salience.search.BM25
    # every domain is reached as an attribute, loaded on first use
    assert salience.explain.KernelShap is not None and salience.compress.prune is not None
    assert salience.data.select_documents is not None
    with pytest.raises(AttributeError):
        salience.not_a_thing  # noqa: B018


def test_errors_form_one_tree():
    for name in ("InvalidParameterError", "ShapeError", "IdMismatchError", "DuplicateIdError", "CorruptIndexError",
                 "WorkerError", "MissingDependencyError"):
        assert issubclass(getattr(salience, name), salience.SalienceError)
    assert issubclass(salience.InvalidParameterError, ValueError)
    assert issubclass(salience.MissingDependencyError, ImportError)


def test_domains_are_attributes_loaded_on_first_use():
    import subprocess
    import sys

    code = ("import sys, salience; assert 'salience.keywords' not in sys.modules; "
            "assert salience.keywords.extract_keyphrases('Graph kernels compare graphs.', k=1).ids; "
            "assert salience.summarize.summarize and salience.data.DocumentScorer")
    subprocess.run([sys.executable, "-c", code], check=True)
