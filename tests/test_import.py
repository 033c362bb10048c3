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


def test_a_command_line_imports_only_its_command():
    # `salience data select` must not pay for the search domain, scipy or the model layer at start-up
    code = ("import sys\nfrom salience.cli import build_parser\n"
            "build_parser('data').parse_args(['data', 'select', '--target', 't', '--raw', 'r', '-k', '1', '--out', 'o'])\n"
            "print(sorted(m for m in ('salience.search', 'salience.models', 'salience.explain', 'scipy.sparse') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_command_parses_alike_with_one_module_or_all():
    import argparse

    from salience.cli import COMMAND_MODULES, build_parser

    def leaves(parser, path=()):
        found = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.update(leaves(sub, (*path, name)))
            elif path:
                found[(*path, action.dest)] = (tuple(action.option_strings), action.default, action.choices)
        return found

    everything = leaves(build_parser())
    for command in COMMAND_MODULES:
        alone = leaves(build_parser(command))
        module = COMMAND_MODULES[command]  # keywords and summarize come in one module
        siblings = {name for name, owner in COMMAND_MODULES.items() if owner == module}
        assert alone == {key: value for key, value in everything.items() if key[0] in siblings}, command
