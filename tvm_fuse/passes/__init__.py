"""Relay passes of the graph half, one per module.

Importing them registers the strategies of the ops they create (``tvm_fuse.strategy``: the fused
conv and the boundary transposes of ``tvm_fuse.boundary_ops``), so that ``relay.build`` can build what a
pass returns even when nothing else of tvm_fuse was used.
"""

from .. import strategy as _strategy  # noqa: F401  pylint: disable=unused-import  (registers)
