"""``tvm-fuse demo|compile|explain`` on the Relax backend (apache-tvm is the installed TVM)."""

import os

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from reference import assert_close
from tvm_fuse import cli, onnx_example
from tvm_fuse.schedules import winograd_tiling

ort = pytest.importorskip("onnxruntime")


def test_compile_writes_a_library_that_runs_right(tmp_path, rng, capsys):
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    out = tmp_path / "block.so"
    assert cli.main(["compile", model, "-o", str(out), "--target", "llvm -mcpu=native"]) == 0
    assert "relax.VirtualMachine" in capsys.readouterr().out
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), want)


def test_compile_takes_the_algorithm_and_precision_options(tmp_path, rng, monkeypatch):
    """``--algorithm direct`` reaches the build (every kernel direct) and the result is right."""
    from tvm_fuse.relax import api  # pylint: disable=import-outside-toplevel

    model = onnx_example.conv_bn_act(tmp_path / "l.onnx", (1, 32, 16, 16), 32, 3, 1, 1)
    chosen = {}
    build = api.build

    def spy(mod, **kwargs):
        optimized = api.optimize(mod, target=kwargs["target"], algorithm=kwargs["algorithm"])
        chosen["algorithms"] = {spec.algorithm for spec in api.describe(optimized)}
        chosen["precision"] = kwargs["precision"]
        return build(mod, **kwargs)

    monkeypatch.setattr(api, "build", spy)
    out = tmp_path / "l.so"
    argv = ["compile", model, "-o", str(out), "--algorithm", "direct", "--precision", "high"]
    assert cli.main(argv) == 0
    assert chosen == {"algorithms": {"direct"}, "precision": "high"}
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    x = rng.standard_normal((1, 32, 16, 16)).astype("float32")
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), want)


def _grouped_model(path):
    w = numpy_helper.from_array(np.ones((8, 2, 3, 3), "float32"), "w")
    nodes = [
        helper.make_node("Conv", ["data", "w"], ["c"], group=4, pads=[1] * 4, kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "grouped",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 10, 10])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return str(path)


def test_explain_prints_kernels_and_the_reasons_for_what_is_left(tmp_path, capsys):
    seed = onnx_example.conv_bn_act(tmp_path / "seed.onnx")
    assert cli.main(["explain", seed, "--backend", "relax"]) == 0
    out = capsys.readouterr().out
    assert "fused kernels: 1" in out and "conv2d + bias + relu" in out
    kernel = "winograd" if "winograd F(" in out else "fused"  # as the cost model chose
    assert f"conv2d_nhwc_{kernel}.x86" in out and "layout transposes left: 2" in out
    assert cli.main(["explain", _grouped_model(tmp_path / "g.onnx")]) == 0
    out = capsys.readouterr().out
    assert "fused kernels: 0" in out and "conv2d not fused: grouped (groups=4)" in out


@pytest.mark.parametrize("algorithm", ["direct", "winograd"])
def test_explain_counts_the_weights_each_module_holds(algorithm, tmp_path, capsys, monkeypatch):
    """BN folds into the weight and a bias; Winograd F(2x2) stores 16 points, then the conv's
    own 9 taps for the non-finite fallback: as many bytes as the model's weight."""
    tile = 2 * (algorithm == "winograd")
    monkeypatch.setattr(winograd_tiling, "choose_winograd_tile", lambda *a, **k: tile)
    ci, co = 16, 32  # Co a whole number of vectors at 8 and 16 lanes: no padding
    path = tmp_path / "conv.onnx"
    onnx_example.conv_bn_act(path, data_shape=(1, ci, 8, 8), channels=co, strides=1)
    model = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(path).graph.initializer)
    weight = 3 * 3 * ci * co * 4
    assert model == weight + 4 * co * 4  # the weight and the four BN vectors
    assert cli.main(["explain", str(path), "--backend", "relax"]) == 0
    out = capsys.readouterr().out
    assert f"conv2d_nhwc_{'winograd' if tile else 'fused'}.x86" in out
    (loops,) = [line for line in out.splitlines() if line.startswith("loops:")]
    # the kernel half's plan; a weight this small: rows (or pixel tiles) before Co blocks
    assert ("parallel blocks of" if tile else "then Co blocks") in loops
    points = 16 if tile else 9
    fused = weight * (points + 9 * (tile > 0)) // 9 + co * 4  # weight and bias
    lines = out[out.index("weights:") :].splitlines()
    assert lines[2].split() == ["constants", f"{model:,}", f"{fused:,}"]
    if tile:
        assert lines[3].split() == ["of", "which", "fallback", f"{weight:,}"]
    else:
        assert "fallback" not in out


def test_demo_checks_itself(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "after LowerFusedConv" in out and "call_tir(tvm_fuse_conv2d_nhwc_fused_0)" in out


@pytest.fixture(scope="module")
def seed_model(tmp_path_factory):
    return onnx_example.conv_bn_act(tmp_path_factory.mktemp("onnx") / "seed.onnx")


@pytest.mark.parametrize("target", ["bogus", "llvm -foo=1", "llvm mcpu"])
def test_a_bad_target_is_a_one_line_error(seed_model, tmp_path, capsys, target):
    out = tmp_path / "seed.so"
    assert cli.main(["compile", str(seed_model), "-o", str(out), "--target", target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"invalid target {target!r}" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "where, says",
    [
        ("missing_dir/seed.so", "cannot write there"),
        (".", "is a directory; give -o a file name such as model.so"),
        ("notes.txt", "exists and is not a shared library; give -o another path, or add --force"),
        ("seed.onnx", "is the model"),
    ],
)
def test_compile_refuses_an_output_that_would_destroy_something(
    seed_model, tmp_path, capsys, monkeypatch, where, says
):
    """One line, nothing written, and an existing file (the notes, the model itself: also
    through a hard link) left as it was; checked before the build."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("keep me")
    os.link(seed_model, tmp_path / "seed.onnx")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert cli.main(["compile", str(seed_model), "-o", where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert not any(p.name.startswith(".tvm_fuse-") for p in tmp_path.iterdir())


def test_compile_replaces_its_own_library_and_other_files_with_force(seed_model, tmp_path):
    library, notes = tmp_path / "seed.so", tmp_path / "notes.so"
    library.write_bytes(b"\x7fELF and the rest of an old library")
    notes.write_text("keep me")
    assert cli.main(["compile", str(seed_model), "-o", str(library)]) == 0
    assert cli.main(["compile", str(seed_model), "-o", str(notes), "--force"]) == 0
    for path in (library, notes):
        tvm.runtime.load_module(str(path))  # a whole library, in place of the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.so", "seed.so"]


def test_relay_backend_is_a_one_line_error_here(tmp_path, capsys):
    seed = onnx_example.conv_bn_act(tmp_path / "seed.onnx")
    assert cli.main(["compile", seed, "--backend", "relay"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs TVM 0.19" in err
