"""What a user hands ``tvm-fuse``, checked: the ONNX model, its input shapes, the target, the
output path. Each check raises :class:`~tvm_fuse.errors.UserError` with one line naming the
file, input or target and what to do, before any long work starts.

The model is loaded by tvmc's own ``frontends.load_model`` (so ``tvm-fuse compile`` and ``tvmc
compile`` see the same Relay module). Refused: a missing file, a file that is not an ONNX model,
external data that lies outside the model's folder (``..``, an absolute path, a symlink out) or
cannot be read -- checked before any of it is loaded, since a crafted model could otherwise copy
any readable file into the package --,
input shapes for inputs the model does not have or that do not type-check, inputs left with a
dynamic shape, a target string TVM does not parse, a non-llvm target, an ``-mcpu`` LLVM does not
know (LLVM would silently fall back to ``generic``: no AVX), an output path that cannot be written.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import onnx
import tvm
from google.protobuf.message import DecodeError
from onnx import external_data_helper
from tvm import relay
from tvm.driver.tvmc import frontends
from tvm.driver.tvmc.model import TVMCModel

from . import interrupts, onnx_compat
from .errors import UserError
from .target import host_target, resolve_native
from .tuning.records import RecordsError, read_records

COMPOSITE_PREFIX = "tvm_fuse,"


# -- the model -------------------------------------------------------------------------------
def read_onnx(path) -> onnx.ModelProto:
    """The ONNX model at ``path``; a UserError if the file is missing or not an ONNX model."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise UserError(f"{path}: {what}; give the path of an ONNX model file (.onnx)")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise UserError(
            f"{path}: not an ONNX model ({_first_line(err)}); export the model to ONNX first, "
            "or compile other formats with 'tvm-fuse tvmc compile'"
        ) from None
    if model.ir_version == 0 or not model.graph.node:
        raise UserError(f"{path}: not an ONNX model (no graph in it); export the model to ONNX")
    check_external_data(path, model)
    return model


def check_external_data(path, model: onnx.ModelProto) -> None:
    """Every external-data file of ``model`` (at ``path``) is a readable file inside the model's
    folder, long enough for its tensor; else a UserError naming the tensor and the location."""
    folder = Path(path).parent.resolve()
    for tensor in external_data_helper._get_all_tensors(model):  # pylint: disable=protected-access
        if external_data_helper.uses_external_data(tensor):
            _check_external_tensor(path, folder, tensor)


def _check_external_tensor(path, folder: Path, tensor) -> None:
    info = external_data_helper.ExternalDataInfo(tensor)
    where = f"{path}: the tensor {tensor.name!r} has external data at {info.location!r}"
    sanitize = getattr(external_data_helper, "_sanitize_path", lambda location: location)
    read = folder / sanitize(info.location)
    inside = all(
        p.resolve().is_relative_to(folder) for p in (folder / info.location, read)
    )
    if not info.location or os.path.isabs(info.location) or not inside:
        raise UserError(
            f"{where}, outside the model's folder {folder}; external data must be a file in "
            "the model's folder (a relative path without '..' or symlinks out of it)"
        )
    if not read.exists():
        raise UserError(f"{where}: {read} does not exist; copy it beside the model")
    if not read.is_file() or not os.access(read, os.R_OK):
        raise UserError(f"{where}: {read} is not a file this user can read")
    needed = (info.offset or 0) + (info.length or _tensor_bytes(tensor))
    if read.stat().st_size < needed:
        raise UserError(
            f"{where}: {read} is shorter than the {needed} bytes the model says it holds; "
            "the file is truncated or belongs to another model"
        )


def _tensor_bytes(tensor) -> int:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return int(np.prod(tensor.dims, dtype=np.int64)) * np.dtype(dtype).itemsize


def graph_inputs(model: onnx.ModelProto) -> dict[str, list]:
    """Input name -> shape (ints, or the dim_param string of a dynamic dimension)."""
    weights = {init.name for init in model.graph.initializer}
    return {
        i.name: [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in _dims(i)]
        for i in model.graph.input
        if i.name not in weights
    }


def _dims(value_info):
    return value_info.type.tensor_type.shape.dim


def check_onnx(path, input_shapes: dict | None = None) -> dict[str, list[int]]:
    """Check the model file and its input shapes before anything long starts: the input name
    -> static shape (``input_shapes`` over the model's own), or a UserError."""
    inputs = graph_inputs(read_onnx(path))
    unknown = sorted(set(input_shapes or {}) - set(inputs))
    if unknown:
        raise UserError(
            f"{path}: --input-shapes names {', '.join(unknown)}, but the model's inputs are "
            f"{', '.join(inputs) or 'none'}"
        )
    shapes = {**inputs, **(input_shapes or {})}
    for name, dims in shapes.items():
        _require_static(path, name, dims)
    return shapes


def _require_static(path, name: str, dims) -> None:
    static = [d if isinstance(d, int) and d > 0 else None for d in dims]
    if None in static:
        shown = "[" + ", ".join("?" if d is None else str(d) for d in static) + "]"
        example = ",".join("1" if d is None else str(d) for d in static)
        raise UserError(
            f"{path}: input {name!r} has a dynamic shape {shown}; give a static one with "
            f'--input-shapes "{name}:[{example}]"'
        )


def load_onnx(path, input_shapes: dict | None = None) -> TVMCModel:
    """The model at ``path`` (checked by :func:`check_onnx`) loaded by tvmc, or a UserError."""
    onnx_compat.install()
    try:
        model = frontends.load_model(str(path), "onnx", input_shapes)
    except tvm.error.OpNotImplemented as err:
        raise UserError(f"{path}: {_first_line(err)}") from None
    except tvm.TVMError as err:
        if not input_shapes:
            raise
        raise UserError(
            f"{path}: the model does not type-check with --input-shapes "
            f"{_shapes_text(input_shapes)} ({_last_line(err).strip()}); check each input's shape"
        ) from None
    for param in relay.transform.InferType()(model.mod)["main"].params:
        dims = [int(d) if isinstance(d, tvm.tir.IntImm) else None for d in param.checked_type.shape]
        _require_static(path, param.name_hint, dims)
    return model


def _shapes_text(shapes: dict) -> str:
    return " ".join(f"{name}:[{','.join(str(d) for d in dims)}]" for name, dims in shapes.items())


# -- the target ------------------------------------------------------------------------------
def check_target(text: str | None) -> tvm.target.Target:
    """``text`` (or the host target when None) as an llvm Target with a CPU LLVM knows.

    A leading ``tvm_fuse,`` (the tvmc composite-target spelling) is accepted and dropped.
    """
    if text is None:
        return host_target()
    text = text.strip()
    if text.replace(" ", "").startswith(COMPOSITE_PREFIX):
        text = text.split(",", 1)[1].strip()
    text = resolve_native(text)
    hint = f'e.g. --target "{_plain(host_target())}"'
    kind = text.split(" ", 1)[0]
    if kind not in tvm.target.Target.list_kinds():
        raise UserError(f"unknown target {text!r}: TVM has no target kind {kind!r}; {hint}")
    try:
        target = tvm.target.Target(text)
    except (tvm.TVMError, ValueError) as err:
        raise UserError(f"invalid target {text!r} ({_target_reason(err)}); {hint}") from None
    if target.kind.name != "llvm":
        raise UserError(f"target {text!r}: tvm-fuse compiles for CPUs (llvm targets); {hint}")
    cpu = str(target.attrs.get("mcpu", ""))
    if cpu and cpu not in _known_cpus(target):
        raise UserError(f"target {text!r}: LLVM does not know the CPU {cpu!r}; {hint}")
    return target


def _target_reason(err) -> str:
    """TVM's reason, without its exception-class prefix and "Target creation ... failed"."""
    reason = _last_line(err).split(": ", 1)[-1]
    return reason.split(". Target creation", 1)[0]


def _known_cpus(target) -> list[str]:
    triple = target.attrs.get("mtriple", "")
    probe = tvm.target.Target(f"llvm -mtriple={triple}" if triple else "llvm")
    return list(tvm.target.codegen.llvm_get_cpu_archlist(probe))


def _plain(target) -> str:
    """The target as a user writes it (without the default ``-keys=cpu``)."""
    return " ".join(part for part in str(target).split() if part != "-keys=cpu")


# -- the output ----------------------------------------------------------------------------
#: The members of a package ``tvmc compile`` writes (the graph executor's classic format).
PACKAGE_MEMBERS = {"mod.so", "mod.json", "mod.params"}


def check_output(output, model, force: bool = False) -> Path:
    """``output`` if writing the package there destroys nothing: it is not the model itself
    (also through a symlink or hard link), and an existing file there is a tvmc package (or
    ``force``); else a UserError."""
    output, model = Path(output), Path(model)
    if output.is_dir():
        raise UserError(f"{output}: is a directory; give -o a file name such as model.tar")
    if output.exists() and model.exists() and os.path.samefile(output, model):
        raise UserError(
            f"{output}: is the model {model} itself; give -o another path, such as "
            f"{model.stem}-tvm_fuse.tar"
        )
    if output.exists() and not force and not is_tvmc_package(output):
        raise UserError(
            f"{output}: exists and is not a tvmc package; give -o another path, or add --force "
            "to replace it"
        )
    return output


def check_log(log, model) -> Path:
    """``log``, a tuning log that ``tune`` may append to: not a directory or the model, an
    existing file there is an AutoTVM log, and its folder can be written; else a UserError."""
    log, model = Path(log), Path(model)
    if log.is_dir():
        raise UserError(f"{log}: is a directory; give --log a file name such as model.log")
    if log.exists() and model.exists() and os.path.samefile(log, model):
        raise UserError(f"{log}: is the model itself; give --log another path such as model.log")
    if log.exists() and log.stat().st_size:
        try:
            read_records(log)
        except RecordsError as err:
            raise UserError(
                f"{err}; tuning appends to --log, so give a new file or an AutoTVM log"
            ) from None
    _require_writable_folder(log, "--log")
    return log


def _require_writable_folder(path: Path, flag: str) -> None:
    """The nearest existing folder of ``path`` takes a new file (tried, not guessed: root may
    write everywhere except where the file system says no)."""
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(
            f"{path}: cannot write there ({folder}: {reason}); choose a writable {flag} path"
        ) from None


def is_tvmc_package(path) -> bool:
    """True for a tar archive holding what ``tvmc compile`` writes (names read, nothing
    extracted)."""
    try:
        with tarfile.open(path) as archive:
            names = {os.path.normpath(name) for name in archive.getnames()}
    except (tarfile.TarError, OSError):
        return False
    return PACKAGE_MEMBERS <= names


def scratch_dir(output) -> tempfile.TemporaryDirectory:
    """A temporary directory beside ``output``, where the package is built before it is moved
    into place (a rename on the same file system); a UserError if nothing can be written there.
    Removed on an interruption too (``interrupts.remove_on_exit``).
    """
    output = Path(output)
    parent = output.parent
    try:
        scratch = tempfile.TemporaryDirectory(prefix=".tvm_fuse-", dir=parent)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(
            f"{output}: cannot write there ({parent}: {reason}); choose a writable -o path"
        ) from None
    interrupts.remove_on_exit(scratch.name)
    return scratch


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _last_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[-1]
