"""tvm_fuse's second backend: the same two halves on Relax and TensorIR (apache-tvm 0.27).

``optimize``, ``build``, ``describe``, ``pipeline``, ``memory_plan`` and ``tune`` load on first use,
so that importing this package imports no TVM. The graph half (``fold_bn``, ``clip``, ``layout``,
``dense``, ``fuse``, ``lower``, ``records``) rewrites a Relax module, ``memory`` places its
activations for the VM; the kernel half (``kernel``, ``winograd``) schedules the shared TE compute
of ``schedules/`` with TensorIR; ``strategy`` is where they meet; ``tuning`` searches the kernels'
tiles; ``compat`` is the only module that knows apache-tvm's spelling. It needs the Relax stack
(``.ci/relax-env DIR``); under TVM 0.19 importing a submodule raises ImportError saying so.
``docs/architecture.md`` describes the Relay backend's twin.
"""

from ..lazy import lazy_exports

_EXPORTS = {
    "build": "api",
    "describe": "api",
    "memory_plan": "api",
    "optimize": "api",
    "pipeline": "api",
    "tune": "tuning",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
