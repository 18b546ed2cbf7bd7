"""Security: local tuning listens on loopback only; a model never reads files outside its folder.

TVM's RPC has no authentication, so a port open beyond 127.0.0.1 lets anyone on the network run
code here. An ONNX model's external-data ``location`` is a path the model's author chose: it must
stay inside the model's folder, or a crafted model copies any readable file into the package.
"""

import os

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper

from tvm_fuse import cli, examples, user_inputs
from tvm_fuse.errors import UserError
from tvm_fuse.tuning import extract_tasks, tuner


# -- local tuning: loopback only -------------------------------------------------------------
def _listeners_of_this_process_tree() -> set:
    """(address, port) of every TCP socket listening in this process or its children."""
    processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
    found = set()
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found |= {c.laddr for c in connections if c.status == psutil.CONN_LISTEN}
    return found


def test_local_tuning_listens_on_loopback_only():
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 14, 14), channels=16)
    (task,) = extract_tasks(mod, params)
    runner = tuner._runner(None, None, None, timeout=5)  # what tune() measures with by default
    before = _listeners_of_this_process_tree()
    attached = runner.set_task(task)  # what each tuning round does first: start tracker + server
    listening = _listeners_of_this_process_tree() - before
    del attached
    assert len(listening) >= 2, listening  # the tracker and the server
    assert {address.ip for address in listening} == {"127.0.0.1"}, listening


# -- ONNX external data stays inside the model's folder ---------------------------------------
def _model_with_external_weight(folder, location, offset=None, length=None):
    """A conv whose weight is external data at ``location`` (written as the model says)."""
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 3, 3, 3])
    weight.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _weights_bytes():
    return np.random.default_rng(0).standard_normal(4 * 3 * 3 * 3).astype("float32").tobytes()


@pytest.fixture
def layout(tmp_path):
    """tmp/secret.bin beside tmp/models/, where the models go."""
    (tmp_path / "secret.bin").write_bytes(_weights_bytes())
    models = tmp_path / "models"
    (models / "weights").mkdir(parents=True)
    return models


@pytest.mark.parametrize("location", ["weights/../../secret.bin", "../secret.bin", "ABSOLUTE"])
def test_external_data_outside_the_model_folder_is_refused(layout, location, capsys):
    if location == "ABSOLUTE":
        location = str(layout.parent / "secret.bin")
    model = _model_with_external_weight(layout, location)
    with pytest.raises(UserError, match="outside the model's folder"):
        user_inputs.check_onnx(model)
    out = layout / "out.tar"
    assert cli.main(["compile", str(model), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the model's folder" in err[0] and "'w'" in err[0]
    assert not out.exists()


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(layout):
    os.symlink(layout.parent / "secret.bin", layout / "weights" / "w.bin")
    model = _model_with_external_weight(layout, "weights/w.bin")
    with pytest.raises(UserError, match="outside the model's folder"):
        user_inputs.check_onnx(model)


def test_tvmc_path_refuses_it_too(layout, capsys):
    model = _model_with_external_weight(layout, "../secret.bin")
    out = layout / "out.tar"
    code = cli.main(["tvmc", "compile", "--target", "tvm_fuse, llvm", "-o", str(out), str(model)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "outside the model's folder" in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "name, offset, length, says",
    [
        ("missing.bin", None, None, "does not exist"),
        ("weights", None, None, "is not a file"),
        ("short.bin", None, 4 * 3 * 3 * 3 * 4 + 4, "shorter than"),
        ("short.bin", 8, None, "shorter than"),
    ],
)
def test_unreadable_external_data_is_one_clear_error(layout, name, offset, length, says):
    (layout / "short.bin").write_bytes(_weights_bytes())
    model = _model_with_external_weight(layout, name, offset, length)
    with pytest.raises(UserError, match=says):
        user_inputs.check_onnx(model)


def test_external_data_inside_the_folder_loads(layout):
    (layout / "weights" / "w.bin").write_bytes(_weights_bytes())
    model = _model_with_external_weight(layout, "weights/w.bin")
    assert user_inputs.check_onnx(model) == {"x": [1, 3, 8, 8]}
    assert user_inputs.load_onnx(model).mod["main"].params[0].name_hint == "x"
    (weight,) = onnx.load(str(model)).graph.initializer
    assert weight.raw_data == _weights_bytes()
