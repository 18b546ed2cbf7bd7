"""tvm_fuse.lowering: the weight prefetch a kernel asks for with a pragma, and where it runs.

A toy kernel stands in for the fused ones (``tests/test_kernel.py`` and ``test_winograd.py``
check theirs): ``out[i, :] = sum_k a[i, k] * w[k, :]`` with ``w`` read as vectors and ``a``
broadcast, the way the conv kernels read their weight and input.
"""

import re

import numpy as np
import pytest
import tvm
from tvm import relay, te

import tvm_fuse
from tvm_fuse import lowering, onnx_example, package
from tvm_fuse import tvmc as fuse_tvmc

pytestmark = pytest.mark.llvm

ROWS, DEPTH, LANES = 8, 32, 16
PREFETCH = re.compile(r"T\.prefetch\(T\.address_of\((\w+)\[(.*?)\]\), 0, 2, 1\)")


def host_target():
    return tvm.target.Target(f"llvm -mcpu={tvm.target.codegen.llvm_get_system_cpu()}")


def toy_kernel(tile_rows: int, distance: int, into_l1: bool = False):
    """(schedule, args): rows of ``tile_rows`` accumulator vectors per step of k, k marked."""
    a = te.placeholder((ROWS, DEPTH), name="a")
    w = te.placeholder((DEPTH, LANES), name="w")
    k = te.reduce_axis((0, DEPTH), name="k")
    out = te.compute((ROWS, LANES), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="out")
    s = te.create_schedule(out.op)
    acc = s.cache_write(out, "local")
    i, _ = s[out].op.axis
    i_outer, _ = s[out].split(i, tile_rows)
    s[acc].compute_at(s[out], i_outer)
    ai, aj = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    s[acc].reorder(ak, ai, aj)
    s[acc].unroll(ai)
    s[acc].vectorize(aj)
    lowering.mark(s[acc], ak, distance, into_l1)
    return s, [a, w, out]


def lowered(tile_rows: int, distance: int, into_l1: bool = False) -> str:
    """The toy kernel scheduled and lowered inside ``lowering_context``, as tvm_fuse builds."""
    with lowering.lowering_context():
        return str(tvm.lower(*toy_kernel(tile_rows, distance, into_l1)))


def run(func, rng):
    a = rng.standard_normal((ROWS, DEPTH)).astype("float32")
    w = rng.standard_normal((DEPTH, LANES)).astype("float32")
    out = tvm.nd.empty((ROWS, LANES), "float32")
    func(tvm.nd.array(a), tvm.nd.array(w), out)
    return out.numpy(), a.astype("float64") @ w.astype("float64")


def test_each_step_prefetches_its_weight_vector_the_distance_ahead():
    text = lowered(tile_rows=4, distance=96)
    prefetches = PREFETCH.findall(text)
    # one per weight vector of the step (w[k], read by every row of the tile), none for the
    # broadcast input or the accumulators
    assert [buffer.split("_")[0] for buffer, _ in prefetches] == ["w"], text
    ((buffer, index),) = prefetches
    base, _, ahead = index.rpartition(" + ")
    assert ahead == "96" and f"{buffer}[{base}:{base} + 16]" in text, prefetches  # the load's
    assert "pragma_" not in text  # the marks are gone


@pytest.mark.parametrize(
    "into_l1, locality, instruction", [(False, 2, "prefetcht1"), (True, 3, "prefetcht0")]
)
def test_a_mark_prefetches_into_l2_or_also_into_l1(into_l1, locality, instruction, rng):
    text = lowered(tile_rows=4, distance=96, into_l1=into_l1)
    assert re.findall(r"T\.prefetch\(.*\), 0, (\d), 1\)", text) == [str(locality)], text
    with lowering.lowering_context():
        func = tvm.build(*toy_kernel(4, 96, into_l1), host_target())
    assert instruction in func.get_source("asm")
    got, want = run(func, rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_marked_loops_accumulators_stay_on_the_stack():
    """TVM puts an allocation over 1 KB (a conv's 14 x 2 vector tile: 1.8 KB) in a heap
    workspace, where LLVM would store the accumulators at every step beside a prefetch."""
    text = lowered(tile_rows=8, distance=16)
    kept = re.findall(r'T\.allocate\(.*"local", annotations=\{"disable_lower_builtin"', text)
    assert len(kept) == 1, text


def test_without_the_pass_there_is_no_mark(rng):
    """Outside ``lowering_context`` (a plain relay.build, AutoTVM's builder) a kernel does not
    mark its loop: LLVM's codegen would warn about an unknown pragma for every kernel."""
    s, args = toy_kernel(tile_rows=4, distance=LANES)
    assert "T.prefetch" not in str(tvm.lower(s, args))
    assert "pragma" not in str(tvm.lower(s, args, simple_mode=True))
    got, want = run(tvm.build(s, args, host_target()), rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_mark_made_outside_the_pass_is_only_ignored(rng):
    """A schedule marked inside ``lowering_context`` but built outside it computes the same."""
    with lowering.lowering_context():
        s, args = toy_kernel(tile_rows=4, distance=LANES)
    assert "T.prefetch" not in str(tvm.lower(s, args))
    got, want = run(tvm.build(s, args, host_target()), rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_prefetching_kernel_computes_the_same(rng):
    """Prefetches past the end of ``w`` (the last steps') are hints: no fault, no change."""
    with lowering.lowering_context():
        func = tvm.build(*toy_kernel(tile_rows=4, distance=DEPTH * LANES), host_target())
    assert "llvm.prefetch" in func.get_source("ll")
    got, want = run(func, rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


GROUPS, VECTORS = 4, 4


def grouped_kernel(tile_rows: int, co_first: bool):
    """(schedule, args): ``out[g, i, :] = sum_k a[i, k] * w[g, k, :]``, a group's slice of
    ``VECTORS`` weight vectors per step of k, k marked to prefetch the next group's. Parallel
    over groups, whose row tiles reread the slice; or over (group, row tile) fused, as the
    direct kernel does with Co blocks before rows."""
    a = te.placeholder((ROWS, DEPTH), name="a")
    w = te.placeholder((GROUPS, DEPTH, VECTORS * LANES), name="w")
    k = te.reduce_axis((0, DEPTH), name="k")
    out = te.compute(
        (GROUPS, ROWS, VECTORS * LANES),
        lambda g, i, j: te.sum(a[i, k] * w[g, k, j], axis=k),
        name="out",
    )
    s = te.create_schedule(out.op)
    acc = s.cache_write(out, "local")
    g, i, _ = s[out].op.axis
    i_outer, _ = s[out].split(i, tile_rows)
    at = s[out].fuse(g, i_outer) if co_first else i_outer
    s[out].parallel(at if co_first else g)
    s[acc].compute_at(s[out], at)
    _, ai, aj = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    aj_vector, aj_lane = s[acc].split(aj, LANES)
    s[acc].reorder(ak, ai, aj_vector, aj_lane)
    s[acc].unroll(ai)
    s[acc].unroll(aj_vector)
    s[acc].vectorize(aj_lane)
    lowering.mark(s[acc], ak, DEPTH * VECTORS * LANES)
    return s, [a, w, out]


def prefetches_by_pass(func: tvm.tir.PrimFunc) -> dict:
    """{pass: (its condition, the weight vectors it prefetches, numbered from the next
    slice's first)}: the branches ``if <pass counter> == pass`` of the lowered ``func``."""
    found = {}

    def visit(node):
        if isinstance(node, tvm.tir.IfThenElse) and isinstance(node.condition, tvm.tir.EQ):
            counter, j = node.condition.a, int(node.condition.b)
            found[j] = (counter, _prefetched_vectors(node.then_case))
            last = node.else_case
            if last is not None and not isinstance(last, tvm.tir.IfThenElse):
                found[j + 1] = (counter, _prefetched_vectors(last))

    tvm.tir.stmt_functor.post_order_visit(func.body, visit)
    return found


def _prefetched_vectors(stmt) -> list:
    indices = []
    tvm.tir.stmt_functor.post_order_visit(
        stmt,
        lambda n: indices.extend(n.args[0].args[0].indices)
        if isinstance(n, tvm.tir.Call) and n.op.name == "tir.prefetch"
        else None,
    )
    vectors = []
    for index in indices:  # at loop variables 0
        zeros = {var: 0 for var in tvm.tir.analysis.undefined_vars(index)}
        offset = tvm.arith.Analyzer().simplify(tvm.tir.stmt_functor.substitute(index, zeros))
        vectors.append((int(offset) - DEPTH * VECTORS * LANES) // LANES)
    return sorted(vectors)


@pytest.mark.parametrize("co_first", [False, True])
@pytest.mark.parametrize("tile_rows, passes", [(2, 4), (4, 2)])
def test_each_vector_of_the_next_slice_is_prefetched_in_one_pass_over_this_one(
    co_first, tile_rows, passes
):
    """The row tiles of a group all read its slice: each of the next slice's vectors is
    prefetched in one of them, spread evenly, instead of in all (``ROWS / tile_rows`` times the
    prefetches) or all in the first."""
    with lowering.lowering_context():
        func = tvm.lower(*grouped_kernel(tile_rows, co_first))["main"]
    by_pass = prefetches_by_pass(func)
    assert {j: vectors for j, (_, vectors) in by_pass.items()} == {
        j: list(range(j, VECTORS, passes)) for j in range(passes)
    }, func
    counters = {str(counter) for counter, _ in by_pass.values()}
    assert counters == ({f"g_i_outer_fused % {passes}"} if co_first else {"i_outer"}), func


@pytest.mark.parametrize("co_first", [False, True])
def test_the_kernels_with_spread_prefetches_compute_the_same(co_first, rng):
    with lowering.lowering_context():
        func = tvm.build(*grouped_kernel(2, co_first), host_target())
    assert "llvm.prefetch" in func.get_source("ll")
    a = rng.standard_normal((ROWS, DEPTH)).astype("float32")
    w = rng.standard_normal((GROUPS, DEPTH, VECTORS * LANES)).astype("float32")
    out = tvm.nd.empty((GROUPS, ROWS, VECTORS * LANES), "float32")
    func(tvm.nd.array(a), tvm.nd.array(w), out)
    want = np.einsum("ik,gkj->gij", a.astype("float64"), w.astype("float64"))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_no_prefetch_where_the_next_parallel_iteration_reads_the_same_slice():
    """Parallel over the row tiles of one slice (a conv with one group of Co blocks): there is
    no next slice; the mark's distance would point past the weight."""
    with lowering.lowering_context():
        s, args = toy_kernel(tile_rows=2, distance=DEPTH * LANES)
        s[args[-1]].parallel(s[args[-1]].leaf_iter_vars[0])
        text = str(tvm.lower(s, args))
    assert "T.parallel" in text and "T.prefetch" not in text, text


def test_the_context_keeps_the_callers_settings_and_passes():
    @tvm.tir.transform.prim_func_pass(opt_level=0)
    def users_pass(func, _mod, _ctx):
        return func

    config = {"tir.add_lower_pass": [(1, users_pass)], "tir.disable_vectorize": True}
    with tvm.transform.PassContext(opt_level=2, config=config, disabled_pass=["FoldScaleAxis"]):
        with lowering.lowering_context(), lowering.lowering_context():  # nested: added once
            current = tvm.transform.PassContext.current()
            passes = [(int(phase), p) for phase, p in current.config["tir.add_lower_pass"]]
    assert current.opt_level == 2 and list(current.disabled_pass) == ["FoldScaleAxis"]
    assert bool(current.config["tir.disable_vectorize"])
    assert [phase for phase, _ in passes] == [1, 2]
    assert passes[0][1].same_as(users_pass) and passes[1][1].same_as(lowering.prefetch_weights)


def small_model():
    data = relay.var("data", shape=(1, 512, 7, 7))
    # a weight (1 MB) that outweighs the input and three times over fills the L2: Co blocks
    # before rows, several groups of them on AVX2 and AVX-512: a next group to prefetch
    weight = np.random.default_rng(0).standard_normal((512, 512, 1, 1)).astype("float32")
    conv = relay.nn.conv2d(data, relay.const(weight), channels=512, kernel_size=(1, 1))
    out = relay.nn.relu(conv)
    return tvm.IRModule.from_expr(relay.Function([data], out))


def test_tvm_fuse_build_prefetches_and_a_plain_relay_build_does_not():
    target = host_target()
    lib = tvm_fuse.build(small_model(), target=target)
    assert "llvm.prefetch" in lib.get_lib().get_source("ll")
    with tvm.transform.PassContext(opt_level=3):
        plain = relay.build(tvm_fuse.optimize(small_model(), target=target), target=target)
    assert "llvm.prefetch" not in plain.get_lib().get_source("ll")


def recording_build(monkeypatch) -> list:
    """``compiler.build`` (tvmc's) replaced by one that records the lower passes it sees."""
    seen, stock = [], fuse_tvmc.compiler.build

    def build(*args, **kwargs):
        passes = tvm.transform.PassContext.current().config.get("tir.add_lower_pass", [])
        seen.append([p.same_as(lowering.prefetch_weights) for _, p in passes])
        return stock(*args, **kwargs)

    monkeypatch.setattr(fuse_tvmc.compiler, "build", build)
    return seen


def test_tvmc_compile_with_the_tvm_fuse_target_builds_with_the_pass(monkeypatch, tmp_path):
    """tvmc's compile builds inside a PassContext of its own; ``tvm_fuse.tvmc`` adds the pass
    there."""
    seen = recording_build(monkeypatch)
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    target = f"tvm_fuse, llvm -mcpu={tvm.target.codegen.llvm_get_system_cpu()}"
    argv = ["compile", "--target", target, "-o", str(tmp_path / "m.tar"), model]
    assert fuse_tvmc.main(argv) == 0
    assert seen == [[True]]


def test_tvm_fuse_compile_builds_with_the_pass(monkeypatch, tmp_path):
    seen = recording_build(monkeypatch)
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    package.compile_onnx(model, str(tmp_path / "m.tar"))
    assert seen == [[True]]
