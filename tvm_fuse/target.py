"""The build target: the host's CPU by default, and one check for every target a user names.

``llvm -mcpu=native`` silently becomes ``-mcpu=generic`` (no AVX) with TVM 0.19's LLVM, so the
host's CPU name is asked of LLVM itself. :func:`as_target` is the one check that the Python API
(``build``, ``tune``, ``explain``) and the command line share. Refused, with a
:class:`~tvm_fuse.errors.UserError` naming the target: a string TVM does not parse, a target kind
other than ``llvm`` (tvm_fuse compiles for CPUs), an ``-mcpu`` LLVM does not know (LLVM would fall
back to ``generic`` without a word), an ``-mtriple`` of another CPU family than this machine's
(the package is linked by the host's compiler, which cannot link a foreign object file).
A leading ``tvm_fuse,`` (the tvmc composite-target spelling) is accepted and dropped, and
``-mcpu=native`` is resolved to the host's CPU name (:func:`resolve_native`).
"""

from __future__ import annotations

import os
import re

import tvm

from .errors import UserError

COMPOSITE_PREFIX = "tvm_fuse,"


def host_target() -> tvm.target.Target:
    """``llvm -mcpu=<this cpu> -num-cores=<cores>``, e.g. ``llvm -mcpu=znver3 -num-cores=2``."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mcpu = f" -mcpu={cpu}" if cpu and cpu != "generic" else ""
    return tvm.target.Target(f"llvm{mcpu} -num-cores={cores or 1}")


def target_or_current(target=None) -> tvm.target.Target:
    """``target`` (a Target as it is, a string checked by :func:`as_target`); None: the
    enclosing ``with target:`` scope's, else the host's. What the graph half packs and chooses
    kernels for: a pass takes any target, and refuses nothing (the kernel half then falls back to
    its generic kernel); the user-facing checks are :func:`as_target`'s."""
    if isinstance(target, tvm.target.Target):
        return target
    if target is not None:
        return as_target(target)
    return tvm.target.Target.current(allow_none=True) or host_target()


def resolve_native(text: str) -> str:
    """``text`` with ``-mcpu=native`` replaced by this CPU's name (LLVM would read generic)."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return re.sub(r"-mcpu=native(?![\w-])", f"-mcpu={cpu}", text)


def as_target(target, spelled: str = "target=") -> tvm.target.Target:
    """``target`` (None: the host; a string or a Target) as a checked llvm Target for this
    machine's CPU family; ``spelled`` is how the hint names the option (``"--target "``)."""
    if target is None:
        return host_target()
    if isinstance(target, tvm.target.Target) and str(target.attrs.get("mcpu", "")) == "native":
        target = str(target)
    text = resolve_native(str(target).strip())
    if text.replace(" ", "").startswith(COMPOSITE_PREFIX):
        text = text.split(",", 1)[1].strip()
    hint = _Hint(spelled)
    kind = text.split(" ", 1)[0]
    if kind not in tvm.target.Target.list_kinds():
        raise UserError(f"invalid target {text!r}: TVM has no target kind {kind!r}; {hint}")
    try:
        parsed = target if isinstance(target, tvm.target.Target) else tvm.target.Target(text)
    except (tvm.TVMError, ValueError) as err:
        raise UserError(f"invalid target {text!r} ({_target_reason(err)}); {hint}") from None
    if parsed.kind.name != "llvm":
        raise UserError(f"target {text!r}: tvm-fuse compiles for CPUs (llvm targets); {hint}")
    _check_triple(text, parsed, hint)
    cpu = str(parsed.attrs.get("mcpu", ""))
    if cpu and cpu not in _known_cpus(parsed):
        raise UserError(f"target {text!r}: LLVM does not know the CPU {cpu!r}; {hint}")
    return parsed


class _Hint:
    """``e.g. --target "llvm -mcpu=znver3"``, worked out only when an error prints it."""

    def __init__(self, spelled: str):
        self.spelled = spelled

    def __str__(self) -> str:
        return f'e.g. {self.spelled}"{_plain(host_target())}"'


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def _check_triple(text: str, target, hint: str) -> None:
    triple = str(target.attrs.get("mtriple", ""))
    host = tvm.target.codegen.llvm_get_system_triple()
    if triple and _arch(triple) != _arch(host):
        raise UserError(
            f"target {text!r}: cross-compiling for {_arch(triple)} is not supported (the package "
            f"is linked for this {_arch(host)} machine); build on that machine, or "
            f"drop -mtriple; {hint}"
        )


def _target_reason(err) -> str:
    """TVM's reason, without its exception-class prefix and "Target creation ... failed"."""
    last = (str(err).strip().splitlines() or [type(err).__name__])[-1]
    return last.split(": ", 1)[-1].split(". Target creation", 1)[0]


def _known_cpus(target) -> list[str]:
    triple = target.attrs.get("mtriple", "")
    probe = tvm.target.Target(f"llvm -mtriple={triple}" if triple else "llvm")
    return list(tvm.target.codegen.llvm_get_cpu_archlist(probe))


def _plain(target) -> str:
    """The target as a user writes it (without the default ``-keys=cpu``)."""
    return " ".join(part for part in str(target).split() if part != "-keys=cpu")
