"""tvm_fuse's memory planner on Relax builds: the arena after StaticPlanBlockMemory.

The residual block of ``onnx_example`` is small and has what matters: tensors of several sizes
whose lives overlap, a reshape (an alias), an output Relax leaves unplanned, and Relax's
storages above the most bytes live at once.
"""

import math

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_fuse.relax as tfr
from helpers import run
from tvm_fuse import onnx_example
from tvm_fuse.errors import UserError
from tvm_fuse.memory import planner
from tvm_fuse.relax import memory, offsets
from tvm_fuse.relax.fallback import ScheduleFallback


@pytest.fixture(scope="module")
def block(tmp_path_factory, target):
    path = onnx_example.residual_block(tmp_path_factory.mktemp("m") / "block.onnx")
    return from_onnx(onnx.load(path), keep_params_in_input=False)


def _static_planned(mod, target):
    """``mod`` optimized and through tvm.compile's passes up to StaticPlanBlockMemory."""
    lowered = relax.transform.LegalizeOps()(tfr.optimize(mod, target=target))
    with target:
        lowered = ScheduleFallback()(lowered)
        return tvm.transform.Sequential(memory.until_static_plan())(lowered)


def _op(value):
    ok = isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
    return value.op.name if ok else ""


def _placed(func):
    """Each alloc_tensor of an R.memory storage: (storage, offset, bytes, first, last binding
    that mentions it or a name bound to it), found here without the planner's liveness."""
    bindings = list(func.body.blocks[0].bindings)
    names = {}  # var -> the alloc_tensor var it names
    placed = {}
    for i, b in enumerate(bindings):
        if _op(b.value) == "relax.memory.alloc_tensor":
            shape = [int(d) for d in b.value.args[2].values]
            dtype = tvm.runtime.DataType(str(b.value.args[3].value))
            size = math.prod(shape) * dtype.bits // 8
            placed[b.var] = [b.value.args[0], int(b.value.args[1].value), size, None, None]
            continue
        used = []
        relax.analysis.post_order_visit(
            b.value, lambda e: used.append(names.get(e, e)) if isinstance(e, relax.Var) else None
        )
        if isinstance(b.value, relax.Var) or _op(b.value) == "relax.reshape":
            names[b.var] = used[0]
            continue
        for v in used:
            if v in placed:
                placed[v][3] = i if placed[v][3] is None else placed[v][3]
                placed[v][4] = i
    return placed


def _storages(func):
    return [
        int(b.value.args[0].values[0])
        for b in func.body.blocks[0].bindings
        if _op(b.value) == "relax.memory.alloc_storage"
    ]


def test_the_arena_is_the_planners_and_no_live_tensors_overlap(block, target):
    planned = _static_planned(block, target)
    plan = memory.plan_of(planned)
    relax_storages = _storages(planned["main"])
    assert plan.relax_bytes == sum(relax_storages) > plan.arena_bytes
    blocks = [planner.Block(t.size, t.start, t.end) for t in plan.liveness.tensors]
    assert plan.arena_bytes == planner.plan_offsets(blocks).arena == plan.lower_bound_bytes

    main = memory.PlaceInArena()(planned)["main"]
    assert _storages(main) == [plan.arena_bytes]  # one arena, the planner's size
    placed = list(_placed(main).values())
    assert len(placed) == len(plan.tensors) > 2
    together = 0
    for i, (storage, offset, size, first, last) in enumerate(placed):
        assert offset % 64 == 0 and offset + size <= plan.arena_bytes
        for other_storage, other, other_size, other_first, other_last in placed[i + 1 :]:
            assert storage.same_as(other_storage)
            if first <= other_last and other_first <= last:  # live together
                together += 1
                assert offset + size <= other or other + other_size <= offset
    assert together >= len(placed) - 1


def test_the_arena_build_equals_relaxs_exactly(block, target):
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    arena = run(tfr.build(block, target=target, memory="tvm_fuse"), x)
    stock_plan = run(tfr.build(block, target=target, memory="tvm"), x)
    np.testing.assert_array_equal(arena, stock_plan)
    assert np.abs(stock_plan).max() > 0.1


def test_relaxs_plan_is_kept_when_the_arena_is_no_smaller(rng, target):
    """One conv: one planned tensor, Relax's storage is already the lower bound."""
    from helpers import module, tensor_var  # pylint: disable=import-outside-toplevel

    w = rng.uniform(-0.5, 0.5, (16, 8, 3, 3)).astype("float32")
    mod = module(
        [tensor_var("data", (1, 8, 10, 10))],
        lambda bb, x: relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w), padding=1)),
    )
    planned = _static_planned(mod, target)
    plan = memory.plan_of(planned)
    assert plan.arena_bytes == plan.relax_bytes
    assert memory.PlaceInArena()(planned).script() == planned.script()


def test_an_unknown_memory_choice_is_one_user_error(block, target):
    with pytest.raises(UserError, match="memory='usmp'; choose one of tvm_fuse, tvm"):
        tfr.build(block, target=target, memory="usmp")


def test_a_prim_func_at_any_offset_reads_and_writes_there(target):
    x = tvm.te.placeholder((4, 8), "float32", name="x")
    y = tvm.te.compute((4, 8), lambda i, j: x[i, j] * 2 + 1, name="y")
    func = offsets.at_any_offset(tvm.te.create_prim_func([x, y]), 64)
    lib = tvm.compile(func.with_attr("global_symbol", "f"), target=target)
    data = np.arange(96, dtype="float32")
    storage = tvm.runtime.tensor(data)
    out = tvm.runtime.tensor(np.zeros(96, "float32"))
    lib["f"](storage._create_view((4, 8), "float32", 64), out._create_view((4, 8), "float32", 128))
    np.testing.assert_array_equal(out.numpy()[32:64], data[16:48] * 2 + 1)
    assert not out.numpy()[:32].any() and not out.numpy()[64:].any()


@pytest.mark.parametrize("seed", range(5))
def test_greedy_placement_never_overlaps_and_respects_the_bound(seed):
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(40):
        start = int(rng.integers(0, 30))
        size = int(rng.choice([0, 40, 64, 1000, 4096, 50000]))
        blocks.append(planner.Block(size, start, start + int(rng.integers(0, 8))))
    placement = planner.plan_offsets(blocks)
    assert placement.strategy == "greedy"  # apache-tvm has no USMP
    for i, a in enumerate(blocks):
        assert placement.offsets[i] % 64 == 0
        assert placement.offsets[i] + a.size <= placement.arena
        for j in range(i + 1, len(blocks)):
            b = blocks[j]
            if a.size and b.size and a.start <= b.end and b.start <= a.end:
                lo, hi = sorted([(placement.offsets[i], a.size), (placement.offsets[j], b.size)])
                assert lo[0] + lo[1] <= hi[0]
    live = max(sum(b.size for b in blocks if b.start <= t <= b.end) for t in range(40))
    assert live <= placement.arena


def test_memory_plan_reports_what_the_build_allocates(block, target):
    """Relax's bytes are its storages' sizes; the lower bound is the most bytes of placed
    tensors live at one binding, both counted here from the lowered module."""
    plan = tfr.memory_plan(block, target=target)
    planned = _static_planned(block, target)
    assert plan.relax_bytes == sum(_storages(planned["main"]))
    placed = list(_placed(planned["main"]).values())
    last = max(p[4] for p in placed)
    most_live = max(sum(p[2] for p in placed if p[3] <= i <= p[4]) for i in range(last + 1))
    assert plan.lower_bound_bytes == most_live <= plan.arena_bytes < plan.relax_bytes
    text = f"Relax's storages {plan.relax_bytes:,} B, tvm_fuse's arena {plan.arena_bytes:,} B"
    assert text in str(plan)
