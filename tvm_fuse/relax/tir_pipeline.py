"""The TIR pipeline the Relax backend compiles with: TVM's default one plus the weight prefetch.

``tvm_fuse.relax.build`` passes :data:`NAME` to ``tvm.compile`` (``tir_pipeline=``). It is the
default CPU pipeline (``s_tir``) with ``tvm_fuse.lowering.prefetch_weights`` run on its result,
before the common subexpression elimination that pipeline ends with: the pass reads the weight
loads' indices in terms of the loop variables, which CSE would hide behind ``let`` bindings. The
kernels' schedules mark the loops to prefetch (``lowering.annotate``); compiled with the default
pipeline, as by a plain ``tvm.compile`` of the module ``tvm_fuse.relax.pipeline`` returns, they
run the same without the prefetch. Measured in one process against the same build with the
default pipeline, outputs identical: see ``docs/performance.md``.
"""

from __future__ import annotations

import tvm

from .. import lowering
from . import compat

#: The name ``tvm.compile``'s ``tir_pipeline`` takes.
NAME = "tvm_fuse"
_BASE = "s_tir"
_NO_CSE = "tirx.disable_cse_tir"


def _factory(**kwargs):
    base, finalize_host, finalize_device = compat.tirx.get_tir_pipeline(_BASE, **kwargs)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.TIRPipeline")
    def pipeline(mod, _ctx):
        current = tvm.transform.PassContext.current()
        config = dict(current.config)
        with lowering.pass_context_like(current, config={**config, _NO_CSE: True}):
            mod = base(mod)
        mod = lowering.prefetch_weights(mod)
        if not config.get(_NO_CSE, False):
            mod = compat.tirx.transform.CommonSubexprElim()(mod)
        return mod

    return pipeline, finalize_host, finalize_device


compat.tirx.register_tir_pipeline(NAME, _factory)
