"""Tuning tasks: one per distinct fused-kernel workload that ``tvm_fuse.build`` compiles.

``autotvm.task.extract_from_program`` lowers the module with AlterOpLayout *disabled*, but the
fast kernel exists only after AlterOpLayout has packed the weight (``tvm_fuse.strategy``): on
the plain optimized module every fused call takes the generic implementation, which has no
template, and nothing is extracted. So the module is first taken through the same
``AlterOpLayout -> FoldConstant`` that ``relay.build`` runs at opt_level 3 under the target,
and the tasks are extracted from that. Their workloads are the ones the real build queries
(``tests/test_tune.py`` checks this with a recording DispatchContext).

Only the fused op is extracted; stock ops of the model (e.g. a dense layer) are not tuned here.
"""

from __future__ import annotations

import tvm
from tvm import autotvm, relay

from .. import dispatch
from ..pipeline import OPT_LEVEL, optimize
from ..op import OP_NAME
from ..target import as_target


def as_built(mod: tvm.IRModule, target) -> tvm.IRModule:
    """An optimized ``mod`` after the layout alteration ``relay.build`` applies for ``target``."""
    seq = tvm.transform.Sequential(
        [
            relay.transform.InferType(),
            relay.transform.AlterOpLayout(),
            relay.transform.FoldConstant(),
        ]
    )
    with target, tvm.transform.PassContext(opt_level=OPT_LEVEL):
        return seq(mod)


def extract_tasks(mod, params=None, target=None) -> list[autotvm.task.Task]:
    """The AutoTVM tasks of the fused kernels of ``mod`` (an unoptimized Relay module).

    ``mod`` and ``params`` are what ``tvm_fuse.build`` takes; one task per distinct workload,
    in the order the kernels are lowered. Fused calls that fall back to the generic kernel
    (see ``strategy.fast_path_refusal``) have no knobs and give no task.
    """
    target = as_target(target)
    built = as_built(optimize(mod, params), target)
    with dispatch.build_context():
        return autotvm.task.extract_from_program(built, {}, target, ops=[relay.op.get(OP_NAME)])


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
