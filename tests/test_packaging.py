"""What an install holds and how the command line reads: every package in the list, a ``--help``
without TVM, tvmc's flag spellings (and today's as aliases), ``-mcpu=native`` as this CPU.

The package list is checked against the source tree (every folder with an ``__init__.py``
under ``tvm_fuse/``, ``schedules/`` and ``benchmarks/``); CI also builds the wheel and installs
it non-editable in a fresh venv.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tvm_fuse import cli

REPO = Path(__file__).resolve().parent.parent


def _setup_module():
    spec = importlib.util.spec_from_file_location("tvm_fuse_setup", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines packages() only: setup() runs as __main__
    return module


def _source_packages() -> set[str]:
    """Installed name of every folder with an ``__init__.py``, from the tree itself."""
    roots = {"tvm_fuse": "tvm_fuse", "schedules": "tvm_fuse.schedules"}
    roots["benchmarks"] = "tvm_fuse.bench"
    found = set()
    for folder, name in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            if "__pycache__" not in parts:
                found.add(".".join((name, *parts)))
    return found


def test_every_source_package_is_installed():
    setup = _setup_module()
    packages = set(setup.packages())
    assert _source_packages() == packages
    assert {"tvm_fuse.tuning", "tvm_fuse.schedules", "tvm_fuse.bench"} <= packages
    for name, folder in setup.MAPPED.items():
        assert (REPO / folder / "__init__.py").is_file(), name


def test_pyproject_supports_python_3_11_to_3_13():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11,<3.14"
    assert project["license"] == "Apache-2.0" and (REPO / "LICENSE").is_file()
    versions = {c.rsplit(" ", 1)[1] for c in project["classifiers"] if "Python :: 3." in c}
    assert versions == {"3.11", "3.12", "3.13"}
    extras = project["optional-dependencies"]
    assert {"bench", "test", "tune"} <= set(extras)
    assert not [d for d in project["dependencies"] + extras["bench"] if "onnx==" in d]


def test_a_plain_install_brings_what_tvm_testing_imports():
    """tvm_fuse.models and the benchmarks use relay.testing and topi.testing, which import
    tvm.testing, which imports pytest: without it a plain install's ``tvm-fuse bench`` fails."""
    tomllib = pytest.importorskip("tomllib")
    import tvm.testing.utils  # pylint: disable=import-outside-toplevel

    assert "import pytest" in Path(tvm.testing.utils.__file__).read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("pytest") for d in project["dependencies"])


# -- --help imports no TVM ---------------------------------------------------------------------
@pytest.mark.parametrize("argv", [[], ["compile"], ["tune"], ["bench"], ["explain"], ["demo"]])
def test_help_imports_no_tvm(argv):
    code = (
        "import sys\n"
        "from tvm_fuse import cli\n"
        "try:\n"
        f"    cli.main({argv + ['--help']!r})\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tvm', 'onnx', 'numpy'))\n"
        "print('heavy modules:', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "usage: tvm-fuse" in done.stdout
    assert "heavy modules: []" in done.stdout, done.stdout[-500:]


# -- tvmc's spellings ----------------------------------------------------------------------------
def _parse(*argv):
    return cli.parser().parse_args(list(argv))


@pytest.mark.parametrize("log_flag", ["-o", "--output", "--log"])
@pytest.mark.parametrize("tracker_flag", ["--rpc-tracker", "--tracker"])
def test_tune_takes_tvmc_flags_and_the_old_ones(log_flag, tracker_flag):
    args = _parse(
        "-v", "tune", "m.onnx", log_flag, "t.log", tracker_flag, "h:9190", "--rpc-key", "k"
    )
    assert (args.log, args.tracker, args.rpc_key, args.verbose) == ("t.log", "h:9190", "k", 1)


def test_verbosity_counts_on_the_subcommand_too():
    assert _parse("compile", "m.onnx", "-vv").verbose == 2
    assert _parse("compile", "m.onnx").verbose == 0


def test_compile_writes_module_tar_by_default_as_tvmc():
    assert _parse("compile", "m.onnx").output == "module.tar"
    assert _parse("compile", "m.onnx", "-o", "x.tar").output == "x.tar"


@pytest.mark.parametrize(
    "flags, given, missing",
    [
        (["--rpc-tracker", "h:1"], "--rpc-tracker", "--rpc-key"),
        (["--rpc-key", "k"], "--rpc-key", "--rpc-tracker"),
    ],
)
def test_tracker_without_key_names_the_flags(tmp_path, capsys, flags, given, missing):
    code = cli.main(["tune", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "t.log"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("tvm-fuse: error: ") and given in err[0] and missing in err[0]
    assert "tracker=" not in err[0] and "key=" not in err[0]  # no Python argument names
    assert not (tmp_path / "t.log").exists()


# -- -mcpu=native ------------------------------------------------------------------------------
def test_mcpu_native_is_this_cpu_on_every_path():
    import tvm  # pylint: disable=import-outside-toplevel

    from tvm_fuse import target, user_inputs  # pylint: disable=import-outside-toplevel

    cpu = tvm.target.codegen.llvm_get_system_cpu()
    for got in (
        target.as_target("llvm -mcpu=native"),
        target.as_target(tvm.target.Target("llvm -mcpu=native")),
        user_inputs.check_target("tvm_fuse, llvm -mcpu=native -num-cores=2"),
    ):
        assert str(got.attrs["mcpu"]) == cpu != "native"
    assert str(target.as_target("llvm -mcpu=skylake").attrs["mcpu"]) == "skylake"
