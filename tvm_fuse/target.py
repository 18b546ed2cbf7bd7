"""The host target: LLVM for this very CPU, never ``generic`` by accident.

``llvm -mcpu=native`` silently becomes ``-mcpu=generic`` (no AVX) with TVM 0.19's LLVM, so the CPU
name is asked of LLVM itself. Every tvm_fuse entry point uses this unless told otherwise.
"""

from __future__ import annotations

import os
import re

import tvm


def host_target() -> tvm.target.Target:
    """``llvm -mcpu=<this cpu> -num-cores=<cores>``, e.g. ``llvm -mcpu=znver3 -num-cores=2``."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mcpu = f" -mcpu={cpu}" if cpu and cpu != "generic" else ""
    return tvm.target.Target(f"llvm{mcpu} -num-cores={cores or 1}")


def resolve_native(text: str) -> str:
    """``text`` with ``-mcpu=native`` replaced by this CPU's name (LLVM would read generic)."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return re.sub(r"-mcpu=native(?![\w-])", f"-mcpu={cpu}", text)


def as_target(target) -> tvm.target.Target:
    """``target`` (None, a string or a Target) as a Target, with a clear error when it is bad;
    ``-mcpu=native`` becomes this CPU."""
    if target is None:
        return host_target()
    if isinstance(target, tvm.target.Target):
        if str(target.attrs.get("mcpu", "")) != "native":
            return target
        target = str(target)
    try:
        return tvm.target.Target(resolve_native(target))
    except (tvm.TVMError, ValueError) as err:
        reason = str(err).strip().splitlines()[-1]
        raise ValueError(f"tvm_fuse: invalid target {target!r}: {reason}") from None
