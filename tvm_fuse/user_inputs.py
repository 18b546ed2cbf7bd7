"""What a user hands ``tvm-fuse``, checked: the ONNX model, its input shapes, the target, the
output path. Each check raises :class:`~tvm_fuse.errors.UserError` with one line naming the
file, input or target and what to do, before any long work starts.

The model is loaded by tvmc's own ``frontends.load_model`` (so ``tvm-fuse compile`` and ``tvmc
compile`` see the same Relay module). Refused: a missing file, a file that is not an ONNX model,
external data that lies outside the model's folder (``..``, an absolute path, a symlink out) or
cannot be read (checked before any of it is loaded: a crafted model could otherwise copy any
readable file into the package), input shapes for inputs the model does not have or that do not
type-check, inputs left with a dynamic shape, tensors too large to index or to fit in memory
(``sizes``), a bad target (``target.as_target``), an output path that cannot be written or that
holds the model or a file that is not a tvmc package (unless forced), a tuning log path that
would destroy a file.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import numpy as np
import onnx
import tvm
from google.protobuf.message import DecodeError
from onnx import external_data_helper
from tvm import relay
from tvm.driver.tvmc import frontends
from tvm.driver.tvmc.model import TVMCModel

from . import onnx_compat, output_files
from .errors import UserError
from .sizes import check_shape, check_tensor_sizes
from .target import as_target
from .tuning.records import check_log_path

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
    model = read_onnx(path)
    inputs = graph_inputs(model)
    unknown = sorted(set(input_shapes or {}) - set(inputs))
    if unknown:
        raise UserError(
            f"{path}: --input-shapes names {', '.join(unknown)}, but the model's inputs are "
            f"{', '.join(inputs) or 'none'}"
        )
    shapes = {**inputs, **(input_shapes or {})}
    dtypes = _input_dtypes(model)
    for name, dims in shapes.items():
        _require_static(path, name, dims)
        check_shape(str(path), f"input {name!r}", dims, dtypes[name])
    return shapes


def _input_dtypes(model: onnx.ModelProto) -> dict:
    return {
        i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        for i in model.graph.input
    }


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
    check_tensor_sizes(model.mod, str(path))
    return model


def _shapes_text(shapes: dict) -> str:
    return " ".join(f"{name}:[{','.join(str(d) for d in dims)}]" for name, dims in shapes.items())


# -- the target ----------------------------------------------------------------------------
def check_target(text: str | None) -> tvm.target.Target:
    """``text`` (or the host target when None) checked by ``target.as_target``, with the
    ``--target`` flag in its hint."""
    return as_target(text, spelled="--target ")


# -- the output ----------------------------------------------------------------------------
#: The members of a package ``tvmc compile`` writes (the graph executor's classic format).
PACKAGE_MEMBERS = {"mod.so", "mod.json", "mod.params"}


def check_output(output, model, force: bool | None = False) -> Path:
    """``output`` if writing the package there destroys nothing
    (``output_files.check_output``: an existing file there must be a tvmc package, or
    ``force``; None: the command has no --force); else a UserError."""
    return output_files.check_output(
        output,
        model,
        kind="a tvmc package",
        example="model.tar",
        is_kind=is_tvmc_package,
        force=force,
    )


def check_log(log, model) -> Path:
    """``log``, a tuning log that ``tune`` may append to (``records.check_log_path``) and not the
    model itself; else a UserError."""
    log, model = Path(log), Path(model)
    if log.exists() and model.exists() and os.path.samefile(log, model):
        raise UserError(f"{log}: is the model itself; give --log another path such as model.log")
    return check_log_path(log, "--log")


def is_tvmc_package(path) -> bool:
    """True for a tar archive holding what ``tvmc compile`` writes (names read, nothing
    extracted)."""
    try:
        with tarfile.open(path) as archive:
            names = {os.path.normpath(name) for name in archive.getnames()}
    except (tarfile.TarError, OSError):
        return False
    return PACKAGE_MEMBERS <= names


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _last_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[-1]
