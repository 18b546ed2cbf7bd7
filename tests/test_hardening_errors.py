"""One clear error for every bad input: the CLI's one line (exit 2), the API's ``UserError``.

Every subcommand that takes a model shares one input check (model, shapes, target, output or
log); the API and the CLI share one target check. All of these fail before any build or tuning.
"""

import re

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import cli, examples, onnx_example
from tvm_fuse.errors import UserError


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("errors")
    path = onnx_example.residual_block(root / "block.onnx")
    (root / "truncated.onnx").write_bytes(open(path, "rb").read()[:200])
    return path


def one_line(capsys, argv, *says):
    """Run the CLI (a usage error exits through argparse): exit 2 and one line naming ``says``."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as done:
        code = done.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert re.match(r"tvm-fuse( \w+)?: error: ", err[0]), err
    for text in says:
        assert text in err[0], err
    return err[0]


# -- the target: one check for the API and the CLI -----------------------------------------------
TARGETS = [
    ("cuda", "compiles for CPUs"),
    ("llvm -mcpu=notacpu", "does not know the CPU 'notacpu'"),
    ("llvm -mtriple=aarch64-linux-gnu", "cross-compiling for aarch64"),
    ("tvm_fuse, llvm -mcpu=nope", "does not know the CPU 'nope'"),
]


@pytest.mark.parametrize("target, says", TARGETS)
def test_the_api_refuses_a_bad_target(target, says):
    mod, params = examples.conv_bn_act(data_shape=(1, 8, 8, 8), channels=8)
    with pytest.raises(UserError, match=re.escape(says)):
        tvm_fuse.build(mod, params, target=target)
    with pytest.raises(UserError, match=re.escape(says)):
        tvm_fuse.tune(mod, params, target=target, log_file="never-written.log")


@pytest.mark.parametrize("command", ["compile", "explain", "tune"])
@pytest.mark.parametrize("target, says", TARGETS)
def test_every_command_refuses_a_bad_target(model, capsys, command, target, says):
    log = ["--log", "t.log"] if command == "tune" else []
    one_line(capsys, [command, model, "--target", target, *log], says, "--target")


# -- tune gets the same input checks as compile ---------------------------------------------------
@pytest.mark.parametrize(
    "which, log, says",
    [
        ("missing", "t.log", "does not exist"),
        ("truncated", "t.log", "not an ONNX model"),
        ("model", "/proc/nowhere/t.log", "cannot write there"),
        ("model", ".", "is a directory"),
    ],
)
def test_tune_checks_its_inputs_before_tuning(model, tmp_path, capsys, which, log, says):
    path = {"missing": tmp_path / "missing.onnx", "model": model}.get(which)
    path = path or model.replace("block.onnx", "truncated.onnx")
    one_line(capsys, ["tune", path, "--log", log, "--trials", "1"], says)


# -- input shapes: parsed whole, small enough to index and to fit in memory ----------------------
@pytest.mark.parametrize("command", ["compile", "explain", "tune"])
@pytest.mark.parametrize(
    "shapes", ["data:[1,3,16,16] junk;;", "data:[1,3,16,16];", "data:[1,3,16,16]x:[1]", ""]
)
def test_input_shapes_that_do_not_parse_whole(model, capsys, command, shapes):
    log = ["--log", "t.log"] if command == "tune" else []
    one_line(capsys, [command, model, "--input-shapes", shapes, *log], "--input-shapes")


@pytest.mark.parametrize(
    "shape, says",
    [
        ("[1,3,100000,100000]", "more than TVM's int32 indexing"),
        ("[100000,3,4096,4096]", "more than TVM's int32 indexing"),
        ("[1,3,10000,10000]", "GiB: more than this machine's"),
        ("[1,3,4096,8192]", "output of"),  # the input fits; the convs' outputs do not
    ],
)
def test_shapes_too_large_to_run(model, capsys, shape, says, monkeypatch):
    monkeypatch.setattr("tvm_fuse.sizes.physical_memory", lambda: 2**30)  # a 1 GiB machine
    argv = ["explain", model, "-q", "--input-shapes", f"data:{shape}"]
    line = one_line(capsys, argv, says)
    assert "data" in line or "output of" in line


def test_the_api_refuses_shapes_too_large_to_run():
    data = relay.var("data", shape=(1, 8, 100000, 100000))
    weight = relay.var("weight", shape=(8, 8, 1, 1))
    func = relay.Function([data, weight], relay.nn.relu(relay.nn.conv2d(data, weight)))
    with pytest.raises(UserError, match="input 'data' has shape \\[1,8,100000,100000\\]"):
        tvm_fuse.build(func)


# -- the probe's finds ------------------------------------------------------------------------
def test_tuning_records_that_are_not_text(model, capsys):
    one_line(capsys, ["compile", model, "--tuning-records", model], "not a text file")


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_tune_refuses_a_timeout_that_is_not_positive(model, capsys, timeout):
    one_line(capsys, ["tune", model, "--log", "t.log", "--timeout", timeout], "--timeout")
    mod, params = examples.conv_bn_act(data_shape=(1, 8, 8, 8), channels=8)
    with pytest.raises(UserError, match="timeout="):
        tvm_fuse.tune(mod, params, log_file="never-written.log", timeout=float(timeout))


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda: tvm_fuse.build("not a module"), "expected a Relay IRModule"),
        (lambda: tvm_fuse.build(None), "expected a Relay IRModule"),
        (lambda: tvm_fuse.tune(_free_function(), log_file="x.log"), "free variables"),
        (lambda: tvm_fuse.tune(_small(), tracker="nowhere", key="k"), "not host:port"),
        (lambda: tvm_fuse.tune(_small(), tuner="annealing"), "unknown tuner"),
        (lambda: tvm_fuse.build(_small(), tuning_records="missing.log"), "does not exist"),
        (lambda: tvm_fuse.build(_ill_typed()), "does not type-check: conv2d: .*input channels of the weight `4`"),
        (lambda: tvm_fuse.optimize(_ill_typed()), "does not type-check"),
        (lambda: tvm_fuse.build(_ill_typed()["main"]), "does not type-check"),  # a Function
        (lambda: tvm_fuse.tune(_ill_typed(), log_file="x.log"), "does not type-check"),
    ],
)
def test_api_errors_are_tvm_fuse_errors(call, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=says) as raised:
        call()
    assert "\n" not in str(raised.value)


def _ill_typed():
    """A conv whose weight has 4 input channels for a data of 8."""
    x = relay.var("x", shape=(1, 8, 8, 8))
    weight = relay.const(np.zeros((16, 4, 3, 3), "float32"))
    return tvm.IRModule.from_expr(relay.Function([x], relay.nn.conv2d(x, weight, channels=16)))


def _small():
    return examples.conv_bn_act(data_shape=(1, 8, 8, 8), channels=8)[0]


def _free_function():
    x, w = relay.var("x", shape=(1, 8, 4, 4)), relay.var("w", shape=(8, 8, 1, 1))
    return relay.Function([x], relay.nn.conv2d(x, w))


@pytest.mark.parametrize("target, says", TARGETS[:3])
def test_tvmc_refuses_a_bad_llvm_part(model, tmp_path, capsys, target, says):
    out = tmp_path / "out.tar"
    argv = ["tvmc", "compile", "--target", f"tvm_fuse, {target}", "-o", out, model]
    one_line(capsys, argv, says, "--target")
    assert not out.exists()
