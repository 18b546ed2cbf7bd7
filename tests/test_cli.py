"""The ``tvm-fuse`` command: compile, explain, bench, and one clear line for every user error.

The error tests run ``cli.main`` in-process (they all fail before any build); one runs the real
``python -m tvm_fuse`` process to check the exit status and that no traceback leaks out.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from tvm.driver.tvmc import frontends, runner
from tvm.driver.tvmc.model import TVMCPackage

from tvm_fuse import cli, describe, onnx_compat, onnx_example, optimize, testing


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    onnx_compat.install()  # the references load the models with stock tvmc's frontends
    root = tmp_path_factory.mktemp("cli")
    (root / "notes.txt").write_text("not a model\n")
    (root / "garbage.onnx").write_bytes(b"\x08\x07 this is not protobuf \xff\xfe")
    (root / "empty.onnx").write_bytes(b"")
    return {
        "root": root,
        "static": onnx_example.residual_block(root / "block.onnx"),
        "dynamic": onnx_example.residual_block(root / "dynamic.onnx", batch=None),
    }


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_user_error(code, err, *names):
    """Exit status 2 and exactly one stderr line: the error, naming each of ``names``."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and re.match(r"tvm-fuse( compile)?: error: ", lines[0]), err
    for name in names:
        assert str(name) in lines[0]


# -- user errors: one line, exit status 2 --------------------------------------------------------
@pytest.mark.parametrize("command", ["compile", "explain"])
def test_a_missing_file(models, capsys, command):
    missing = models["root"] / "missing.onnx"
    code, _, err = _run(capsys, command, missing)
    _assert_user_error(code, err, missing, "does not exist")


@pytest.mark.parametrize("name", ["notes.txt", "garbage.onnx", "empty.onnx"])
def test_a_file_that_is_not_onnx(models, capsys, name):
    path = models["root"] / name
    code, _, err = _run(capsys, "compile", path, "-o", models["root"] / "x.tar")
    _assert_user_error(code, err, path, "not an ONNX model")
    assert not (models["root"] / "x.tar").exists()


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_dynamic_input_shapes_without_input_shapes(models, capsys, command):
    code, _, err = _run(capsys, command, models["dynamic"])
    _assert_user_error(code, err, models["dynamic"], "'data'", '--input-shapes "data:[1,3,16,16]"')


def test_input_shapes_for_an_input_the_model_lacks(models, capsys):
    code, _, err = _run(capsys, "explain", models["static"], "--input-shapes", "image:[1,3,8,8]")
    _assert_user_error(code, err, "image", "the model's inputs are data")


def test_malformed_input_shapes(models, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compile", models["static"], "--input-shapes", "data=1x3"])
    _assert_user_error(exit_.value.code, capsys.readouterr().err, "--input-shapes")


@pytest.mark.parametrize(
    "target, says",
    [
        ("foo -mcpu=znver3", "TVM has no target kind 'foo'"),
        ("llvm -mcpu=nosuchcpu", "LLVM does not know the CPU 'nosuchcpu'"),
        ("llvm -tiles=4", "invalid target"),
        ("cuda", "tvm-fuse compiles for CPUs"),
    ],
)
def test_an_unknown_target(models, capsys, target, says):
    code, _, err = _run(capsys, "compile", models["static"], "--target", target)
    _assert_user_error(code, err, target, says, "--target")


@pytest.mark.parametrize("where", ["missing_dir/out.tar", "notes.txt/out.tar", "."])
def test_an_unwritable_output_path(models, capsys, where):
    output = models["root"] / where
    code, _, err = _run(capsys, "compile", models["static"], "-o", output)
    _assert_user_error(code, err, output)
    assert "-o" in err


def test_missing_tuning_records(models, capsys):
    code, _, err = _run(capsys, "compile", models["static"], "--tuning-records", "nope.log")
    _assert_user_error(code, err, "nope.log", "--tuning-records")


def test_the_real_process_exits_2_without_traceback(models):
    missing = str(models["root"] / "missing.onnx")
    env = {**os.environ, "TOPHUB_LOCATION": "NONE"}
    done = subprocess.run(
        [sys.executable, "-m", "tvm_fuse", "compile", missing],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tvm-fuse: error: {missing}: does not exist; give the path of an ONNX model file (.onnx)"
    ]


# -- compile and explain (builds) --------------------------------------------------------------
def test_compile_writes_a_tvmc_package_that_matches_stock_tvm(models, capsys, tmp_path):
    output = tmp_path / "block2.tar"
    shapes = "data:[2,3,16,16]"
    code, out, err = _run(
        capsys, "compile", models["dynamic"], "-o", output, "--input-shapes", shapes
    )
    assert code == 0, err
    assert f"wrote {output}" in out
    stages = [line.split(" ...")[0].split()[0] for line in err.strip().splitlines()]
    assert stages == ["loading", "optimizing", "building", "writing"]
    assert all(line.endswith(" s") for line in err.strip().splitlines())
    assert sorted(os.listdir(tmp_path)) == ["block2.tar"]  # no scratch directory left

    with tarfile.open(output) as tar:
        graph = json.load(tar.extractfile("mod.json"))
    assert graph["attrs"]["shape"][1][0] == [2, 3, 16, 16]
    data = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype("float32")
    result = runner.run_module(TVMCPackage(str(output)), "cpu", inputs={"data": data})
    got = result.outputs["output_0"]

    model = frontends.load_model(models["dynamic"], "onnx", {"data": [2, 3, 16, 16]})
    (ref,) = testing.run(testing.build_stock(model.mod, model.params), {"data": data})
    assert got.shape == ref.shape == (2, 10)
    assert testing.relative_error(got, ref) <= testing.MODEL_RTOL


def test_explain_prints_kernels_layout_leftovers_and_memory(models, capsys):
    code, out, err = _run(capsys, "explain", models["static"])
    assert code == 0, err
    model = frontends.load_model(models["static"])
    for spec in describe(optimize(model.mod, model.params)):
        assert str(spec) in out
    assert "fused kernels (2)" in out
    # the exit's transpose; the stem conv reads the NCHW image itself (passes/entry.py)
    assert "layout_transform ops left (1)" in out and "of graph input 'data'" not in out
    assert "transposing its NCHW input as it pads it" in out
    assert "left unfused (0)" in out
    assert "nn.dense x1" in out and "nn.max_pool2d x1" in out
    memory = out.split("== memory plan")[1]
    assert "peak (planned arena)" in memory or "not available" in memory


# -- bench -------------------------------------------------------------------------------------
def test_bench_runs_each_installed_suite_and_passes_options(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or len(calls) - 1)
    code = cli.main(["bench", "--quick", "--no-peers", "--results", "out"])
    assert code == 1  # the first non-zero exit status of the suites (here: the second's)
    modules = ["tvm_fuse.bench.bench_layers", "tvm_fuse.bench.bench_models"]
    assert [c[:3] for c in calls] == [[sys.executable, "-m", m] for m in modules]
    assert all(c[3:] == ["--results", "out", "--quick", "--no-peers"] for c in calls)
    assert all(importlib.util.find_spec(m) is not None for m in modules)
    assert "tvm_fuse.bench.bench_models finished" in capsys.readouterr().err


def test_bench_one_suite_with_its_json(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    assert cli.main(["bench", "zoo", "--json", "z.json"]) == 0
    assert calls == [
        [sys.executable, "-m", "tvm_fuse.bench.zoo", "--results", "bench-results"]
        + ["--json", "z.json"]
    ]


def test_bench_refuses_one_json_for_several_suites(monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "call", lambda cmd: pytest.fail(f"ran {cmd}"))
    code, _, err = _run(capsys, "bench", "--json", "all.json")
    _assert_user_error(code, err, "--json all.json", "--results")
