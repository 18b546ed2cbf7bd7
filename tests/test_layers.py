"""The package's layers import one way, without cycles, and importing it changes nothing.

``LAYERS`` is the declared order (``docs/architecture.md``, "Layers"): a module may import its
own layer and the ones listed before it, never a later one. Imports are read from the source
(every ``import`` statement, also those inside functions), and importing ``a.b.c`` counts as
importing the packages ``a.b`` and ``a`` too, since Python runs their ``__init__`` first.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tvm_fuse import import_check

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tvm_fuse"
#: Where each (sub)package's source lives; ``schedules/`` is installed as ``tvm_fuse.schedules``.
SOURCES = {PACKAGE: ROOT / "tvm_fuse", f"{PACKAGE}.schedules": ROOT / "schedules"}

#: Module-name patterns (relative to ``tvm_fuse``) per layer, lowest first.
LAYERS = [
    (
        "foundation",
        ["spec", "errors", "target", "ir_utils", "bn_fold", "dispatch", "lazy", "sizes", "backend"]
        + ["tir_compat", "lowering"]
        + ["algorithm_options"]
        + ["relax", "relax.compat", "relax.tir_pipeline"],  # the Relax backend's package, its
        # apache-tvm API and the TIR pipeline it compiles with
    ),
    (
        "kernel half",
        ["schedules", "schedules.*", "relax.kernel", "relax.winograd", "relax.fallback"],
    ),
    ("relay ops", ["op", "boundary_ops"]),
    ("meeting point", ["strategy", "relax.strategy"]),
    (
        "graph half",
        ["passes", "passes.*", "params"]
        + ["relax.fold_bn", "relax.layout", "relax.clip", "relax.dense", "relax.fuse"]
        + ["relax.lower", "relax.records"],
    ),
    ("memory plan", ["memory", "memory.*", "relax.memory", "relax.offsets"]),
    ("pipeline", ["api", "relax.api"]),
    ("tuning", ["tuning", "tuning.*", "tuning_rule", "relax.tuning"]),
    ("examples", ["examples", "models", "onnx_example", "testing", "import_check"]),
    ("relax tools", ["relax.bench", "relax.commands"]),  # apache-tvm only
    (
        "tools",
        [
            "memory.report",
            "memory.__main__",
            "tuning.cli",
            "cli",
            "cli_options",
            "interrupts",
            "shape_text",
            "onnx_compat",
            "__main__",
            "explain",
            "demo",
            "package",
            "user_inputs",
            "output_files",
            "progress",
            "tvmc",
        ],
    ),
    ("facade", [""]),  # tvm_fuse/__init__.py: the public names, imported by nothing inside
]


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> source file."""
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _layer(module: str) -> int:
    """The index of the last layer whose patterns match ``module`` (exact names beat globs)."""
    name = module[len(PACKAGE) + 1 :]
    exact = [i for i, (_, patterns) in enumerate(LAYERS) if name in patterns]
    globs = [i for i, (_, pats) in enumerate(LAYERS) if any(fnmatch.fnmatch(name, p) for p in pats)]
    if not exact and not globs:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return (exact or globs)[-1]


def _imported(module: str, path: Path, modules: dict) -> set[str]:
    """The package's modules that ``module`` imports, with the packages whose ``__init__`` Python
    runs first (not those ``module`` is inside: they are running already)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    explicit, names = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            explicit.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    for name in explicit | names:
        parts = name.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    ancestors = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    return {t for t in explicit | (names - ancestors) if t in modules and t != module}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imported(m, path, modules) for m, path in modules.items() if m != PACKAGE}


def test_every_module_imports_only_its_layer_and_below(graph):
    upward = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
        for m, targets in sorted(graph.items())
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_the_core_imports_neither_tuning_nor_tools(graph):
    core = {m for m in graph if _layer(m) <= _layer(f"{PACKAGE}.api")}
    assert f"{PACKAGE}.strategy" in core and f"{PACKAGE}.passes.fuse" in core
    reached, todo = set(), sorted(core)
    while todo:  # everything the core imports, directly or not
        for target in graph.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert not {m for m in reached if _layer(m) > _layer(f"{PACKAGE}.api")}


def test_no_import_cycles(graph):
    state: dict[str, str] = {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def _environ(drop=("TOPHUB_LOCATION",)) -> dict[str, str]:
    """This process's environment without ``drop``: a user's, where the suite sets TopHub off."""
    return {k: v for k, v in os.environ.items() if k not in drop}


def _python(code: str, env_drop=("TOPHUB_LOCATION",)) -> subprocess.CompletedProcess:
    env = _environ(env_drop)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _importable_here(module: str) -> bool:
    """The Relax backend's submodules import only under apache-tvm (``tests_relax`` checks them
    there); decided without importing TVM into the collecting process."""
    return not module.startswith(f"{PACKAGE}.relax.") or _installed_stack() == "relax"


@functools.lru_cache(maxsize=None)
def _installed_stack() -> str:
    done = _python("from tvm_fuse import backend; print(backend.installed())")
    return done.stdout.strip()


IMPORTED_FIRST = sorted(set(_modules()) - {f"{PACKAGE}.__main__"})


@pytest.fixture(scope="module")
def import_failures() -> dict[str, str]:
    """Each module imported first in a child of an interpreter that has imported TVM only
    (``tvm_fuse.import_check``), without ``TOPHUB_LOCATION`` as a user's would be."""
    return import_check.import_each_first(filter(_importable_here, IMPORTED_FIRST), env=_environ())


@pytest.mark.parametrize("module", IMPORTED_FIRST)
def test_each_module_imports_first_in_a_fresh_interpreter(module, import_failures):
    if not _importable_here(module):
        pytest.skip("the Relax backend needs apache-tvm (tests_relax imports it there)")
    assert module not in import_failures, import_failures.get(module)


def test_a_module_that_fails_to_import_is_reported_with_its_traceback(tmp_path, monkeypatch):
    (tmp_path / "broken_first.py").write_text("import tvm\nraise ImportError('missing piece')\n")
    (tmp_path / "fine_first.py").write_text("import tvm\nVALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    failures = import_check.import_each_first(["fine_first", "broken_first"])
    assert list(failures) == ["broken_first"]
    assert "ImportError: missing piece" in failures["broken_first"]


@pytest.mark.llvm
def test_import_and_build_leave_the_environment_alone_and_never_reach_tophub():
    """No ``TOPHUB_LOCATION`` in the environment: importing and building must not set it, and
    the build must not consult TopHub (its context function and any socket connect fail)."""
    done = _python("""
        import os, socket
        before = dict(os.environ)
        import tvm_fuse
        from tvm import autotvm
        from tvm_fuse import examples, testing

        assert dict(os.environ) == before, "import tvm_fuse changed os.environ"

        def refuse(*args, **kwargs):
            raise AssertionError("TopHub or the network was consulted")

        autotvm.tophub.context = refuse
        socket.socket.connect = refuse
        mod, params = examples.conv_bn_act((1, 8, 10, 10), channels=8)
        inputs = examples.random_inputs(mod, params)
        got = testing.run(tvm_fuse.build(mod, params), inputs)
        testing.assert_close(got, testing.run(testing.build_stock(mod, params), inputs))
        assert dict(os.environ) == before, "tvm_fuse.build changed os.environ"
        print("ok")
        """)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
