"""The Relax pipeline on ONNX models, end to end against ONNX Runtime.

The seed example of ``docs/architecture.md`` and the residual block of ``tvm_fuse.onnx_example``
are imported with ``tvm.relax.frontend.onnx.from_onnx`` (BatchNormalization kept), optimized and
built by ``tvm_fuse.relax``, run with ``relax.VirtualMachine`` and compared with ONNX Runtime
within 1e-4 of max |reference|.
"""

import re
import warnings

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_fuse.relax as tfr
from helpers import conv_nchw, module, op_names, run, tensor_var, transposes
from reference import assert_close, conv2d_nchw
from tvm_fuse import onnx_example
from tvm_fuse.relax import compat, kernel
from tvm_fuse.schedules import winograd_weights

ort = pytest.importorskip("onnxruntime")


def _onnx_reference(path, x):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"data": x})[0]


def _input(path, rng):
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    return rng.standard_normal([d.dim_value for d in dims]).astype("float32")


@pytest.fixture(scope="module")
def seed_path(tmp_path_factory):
    return onnx_example.conv_bn_act(tmp_path_factory.mktemp("onnx") / "seed.onnx")


@pytest.fixture(scope="module")
def block_path(tmp_path_factory):
    return onnx_example.residual_block(tmp_path_factory.mktemp("onnx") / "block.onnx")


def test_seed_example_matches_onnxruntime(seed_path, rng, target):
    mod = from_onnx(onnx.load(seed_path), keep_params_in_input=False)
    x = _input(seed_path, rng)
    got = run(tfr.build(mod, target=target), x)
    assert_close(got, _onnx_reference(seed_path, x))
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.ops == ("conv2d", "bias", "relu")
    assert spec.strides == (2, 2) and spec.padding == (1, 1, 1, 1)
    assert spec.data.shape == (1, 56, 56, 64) and spec.out.shape == (1, 28, 28, 128)
    lanes = compat.simd_lanes(target)
    if spec.algorithm == "winograd":  # where the cost model expects the polyphase form to pay
        m = spec.winograd_tile
        assert spec.weight.layout == winograd_weights.winograd_layout(m, lanes, 2)
        assert spec.weight.shape == winograd_weights.transformed_shape(m, lanes, 64, 128)
    else:
        assert spec.weight.layout == f"OHWI{lanes}o"
        assert spec.weight.shape == (128 // lanes, 3, 3, 64, lanes)


def test_every_kernel_is_compiled_with_noalias(seed_path, target):
    """Codegen lets LLVM assume a kernel's buffers do not alias (a ``_compute_`` function with
    noalias parameters) only if every PrimFunc of the module says so: one that does not, such as
    a hand-written one with another attribute name, turns it off for all, and the fused conv's
    inner loop then holds a third of its FMAs. The seed's exit is the in-register transpose."""
    mod = from_onnx(onnx.load(seed_path), keep_params_in_input=False)
    names = op_names(tfr.optimize(mod, target=target))
    exit_kernel = [n for n in names if n.startswith("relax.call_tir:tvm_fuse_nhwc_to_nchw")]
    assert exit_kernel
    llvm_ir = tfr.build(mod, target=target).mod.imports[0].inspect_source("ll")
    kernels = re.findall(r"define dllexport i32 @__tvm_ffi_(\w+)\(", llvm_ir)
    assert len(kernels) == 3  # entry, conv, exit
    for name in kernels:
        assert re.search(rf"@{name}_compute_\([^)]*ptr noalias", llvm_ir), name


def test_build_names_a_primfunc_without_noalias(rng, target):
    """A hand-written PrimFunc without the noalias attribute takes it from every kernel of its
    module (see above): ``build`` names it in one warning, and the result stays right."""
    from tvm.script import tirx as T  # pylint: disable=import-outside-toplevel

    shape = (1, 16, 12, 12)

    @T.prim_func
    def add_one(a: T.Buffer(shape, "float32"), b: T.Buffer(shape, "float32")):
        for n, c, h, w in T.grid(*shape):
            b[n, c, h, w] = a[n, c, h, w] + T.float32(1)

    weight = rng.standard_normal((16, 16, 3, 3)).astype("float32")

    def conv_relu(bb, data):
        return relax.op.nn.relu(bb.emit(conv_nchw(data, weight)))

    def then_add_one(bb, data):
        out = compat.TensorType(shape, "float32")
        return relax.call_tir(bb.add_func(add_one, "add_one"), [bb.emit(conv_relu(bb, data))], out)

    x = rng.standard_normal(shape).astype("float32")
    expected = np.maximum(conv2d_nchw(x, weight, padding=(1,) * 4), 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = tfr.build(module([tensor_var("data", shape)], conv_relu), target=target)
    assert not [w for w in caught if "noalias" in str(w.message)]
    with pytest.warns(UserWarning, match=r"'tirx.noalias' on PrimFunc\(s\) add_one, apache"):
        exe = tfr.build(module([tensor_var("data", shape)], then_add_one), target=target)
    assert_close(run(plain, x), expected, rel=1e-5)
    assert_close(run(exe, x), expected + 1, rel=1e-5)


def test_residual_block_matches_onnxruntime_with_transposes_at_the_boundaries(
    block_path, rng, target
):
    mod = from_onnx(onnx.load(block_path), keep_params_in_input=False)
    optimized = tfr.optimize(mod, target=target)
    names = op_names(optimized)
    assert "relax.nn.conv2d" not in names and "relax.nn.batch_norm" not in names
    assert names[0].startswith("relax.call_tir:tvm_fuse_nchw_to_nhwc")  # the entry
    exit_kernel = [n for n in names if n.startswith("relax.call_tir:tvm_fuse_nhwc_to_nchw")]
    assert len(transposes(names)) == 2 and len(exit_kernel) == 1  # and the exit, after pooling
    assert names.index(exit_kernel[0]) > names.index("relax.mean")
    specs = tfr.describe(optimized)
    assert [s.ops for s in specs] == [("conv2d", "bias", "relu"), ("conv2d", "bias", "add", "relu")]
    x = _input(block_path, rng)
    assert_close(run(tfr.build(mod, target=target), x), _onnx_reference(block_path, x))


def test_params_given_apart_are_bound(block_path, rng, target):
    mod = from_onnx(onnx.load(block_path), keep_params_in_input=True)
    mod, detached = relax.frontend.detach_params(mod)
    main = mod["main"]
    names = [p.name for p in main.params][int(main.attrs["num_input"]) :]
    params = dict(zip(names, detached["main"]))
    assert len(params) >= 10
    x = _input(block_path, rng)
    got = run(tfr.build(mod, params, target=target), x)
    assert_close(got, _onnx_reference(block_path, x))
    assert len(tfr.describe(tfr.optimize(mod, params, target))) == 2


def test_pipeline_inside_a_users_sequential(block_path, rng, target):
    mod = from_onnx(onnx.load(block_path), keep_params_in_input=False)
    passes = [
        relax.transform.Normalize(),
        tfr.pipeline(target),
        relax.transform.DeadCodeElimination(),
    ]
    optimized = tvm.transform.Sequential(passes)(mod)
    assert tfr.describe(optimized) == tfr.describe(tfr.optimize(mod, target=target))
    assert len(tfr.describe(optimized)) == 2
    x = _input(block_path, rng)
    assert_close(run(tvm.compile(optimized, target=target), x), _onnx_reference(block_path, x))


def test_default_build_pipeline_leaves_the_kernels_as_scheduled(seed_path, target):
    optimized = tfr.optimize(
        from_onnx(onnx.load(seed_path), keep_params_in_input=False), target=target
    )
    before = {gv.name_hint: f for gv, f in optimized.functions_items() if kernel.spec_of(f)}
    with target:
        after = relax.get_pipeline("default")(optimized)
    kernels = {
        gv.name_hint: f for gv, f in after.functions_items() if isinstance(f, compat.PrimFunc)
    }
    assert before and set(before) <= set(kernels)
    for name, func in before.items():
        tvm.ir.assert_structural_equal(kernels[name].body, func.body)


def test_tvms_own_schedulers_leave_the_kernels_alone(seed_path, target):
    """Every kernel tvm_fuse writes is marked scheduled the way TVM's dlight and meta_schedule
    read it, so neither reschedules nor tunes it; a rule that would schedule everything sees none
    of them."""
    from tvm.s_tir import dlight  # pylint: disable=import-outside-toplevel

    optimized = tfr.optimize(
        from_onnx(onnx.load(seed_path), keep_params_in_input=False), target=target
    )
    kernels = [f for _, f in optimized.functions_items() if isinstance(f, compat.PrimFunc)]
    assert len(kernels) == 3  # entry, conv, exit
    assert all(int(f.attrs["tirx.is_scheduled"]) == 1 for f in kernels)
    seen = []

    @dlight.ScheduleRule.from_callable("everything")
    def everything(func, _target, _tunable):
        seen.append(func)

    with target:
        dlight.ApplyDefaultSchedule(everything)(optimized)
    assert not seen


def test_unbound_weights_are_packed_by_relax_ops_at_run_time(block_path, rng, target):
    """Weights left as inputs of ``main``: nothing to fold, the convs still fuse, their weights
    are packed by Relax ops in the graph (Co 16 on AVX2 and AVX-512 alike: 16 is whole)."""
    mod = from_onnx(onnx.load(block_path), keep_params_in_input=True)
    mod, detached = relax.frontend.detach_params(mod)
    optimized = tfr.optimize(mod, target=target)
    assert "relax.nn.batch_norm" in op_names(optimized)  # not constants: not folded
    assert len(tfr.describe(optimized)) == 2
    assert "relax.permute_dims" in op_names(optimized)[1:]  # the packing, in the graph
    x = _input(block_path, rng)
    got = run(tfr.build(mod, target=target), x, *[p.numpy() for p in detached["main"]])
    assert_close(got, _onnx_reference(block_path, x))


def test_unbound_ragged_weight_is_padded_by_relax_ops(tmp_path, rng, target):
    path = onnx_example.conv_bn_act(tmp_path / "c20.onnx", (1, 8, 12, 12), channels=20, strides=1)
    mod = from_onnx(onnx.load(path), keep_params_in_input=True)
    mod, detached = relax.frontend.detach_params(mod)
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.out_channels == 20 and spec.weight.shape[0] * spec.weight.shape[4] >= 24
    x = _input(path, rng)
    got = run(tfr.build(mod, target=target), x, *[p.numpy() for p in detached["main"]])
    assert_close(got, _onnx_reference(path, x))
