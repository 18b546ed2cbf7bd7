"""Tuning tasks: one per distinct fused-kernel workload that ``tvm_fuse.build`` compiles.

The tasks are extracted (``autotvm.task.extract_from_program``) from the module exactly as
``tvm_fuse.optimize`` leaves it for the target: its weights are already packed by the pipeline,
and the template's workload is the logical one (``schedules.conv2d_nhwc_fused.WORKLOAD_FIELDS``),
so stock task extraction, ``tvmc tune`` included, finds the same tasks whose records the build
queries (``tests/test_tune.py`` checks this with a recording DispatchContext).

Only the fused op is extracted; stock ops of the model (e.g. a dense layer) are not tuned here.
"""

from __future__ import annotations

from tvm import autotvm, relay

from .. import dispatch
from ..api import optimize
from ..op import OP_NAME
from ..target import as_target


def extract_tasks(mod, params=None, target=None) -> list[autotvm.task.Task]:
    """The AutoTVM tasks of the fused kernels of ``mod`` (an unoptimized Relay module).

    ``mod`` and ``params`` are what ``tvm_fuse.build`` takes; one task per distinct workload,
    in the order the kernels are lowered. Fused calls that fall back to the generic kernel
    (see ``strategy.fast_path_refusal``) and depthwise ones (``schedules.depthwise``) have no
    knobs and give no task.
    """
    target = as_target(target)
    optimized = optimize(mod, params, target)
    with dispatch.build_context():
        return autotvm.task.extract_from_program(
            optimized, {}, target, ops=[relay.op.get(OP_NAME)]
        )


def default_config_index(task: autotvm.task.Task) -> int:
    """The index in ``task``'s config space of the analytic default (the template's fallback).

    The template sets every knob from ``schedules.tiling`` when its config is a fallback; this
    instantiates it with one and finds those values among each knob's options.
    """
    fallback = autotvm.task.space.FallbackConfigEntity()
    with task.target:
        task.instantiate(fallback)
    space = task.config_space
    knob = [
        next(i for i, option in enumerate(knob_space.entities) if _same(option, fallback[name]))
        for name, knob_space in space.space_map.items()
    ]
    return space.knob2point(knob)


def _same(option, chosen) -> bool:
    """Whether a knob's option is the fallback's choice (a split's outer factor may be -1)."""
    if hasattr(chosen, "size"):
        return list(option.size[1:]) == list(chosen.size[1:])
    return option.val == chosen.val
