"""``tvm-fuse compile``: an ONNX model into a tvmc package, with tvm_fuse's pipeline applied.

The same steps as ``tvmc compile --target "tvm_fuse, llvm ..."`` (see ``tvm_fuse.tvmc``), made of
tvmc's own functions — ``frontends.load_model``, ``compiler.compile_model`` — so the result is an
ordinary tvmc package that the stock ``tvmc run`` runs. Each stage prints a progress line:
loading, optimizing (the tvm_fuse pipeline), building (tvmc's ``relay.build`` with the tuning
records, if any) and writing. The package is built in a scratch directory beside the output and
moved into place at the end, so a failed build never leaves a half-written file.

Every input is checked first (``tvm_fuse.user_inputs``); a mistake is a one-line ``UserError``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

import tvm
from tvm.driver.tvmc import compiler
from tvm.driver.tvmc.model import TVMCModel

from . import dispatch, output_files, user_inputs
from .errors import UserError
from .api import describe
from .memory.apply import apply_to_package
from .progress import Progress
from .spec import KernelSpec
from .tvmc import lowering_in_build, pass_pipeline
from .tuning.records import RecordsError, check_records

#: Loggers that warn once per conv about TVM's own untuned schedules: noise for a user.
QUIET_LOGGERS = ("autotvm", "strategy", "te_compiler")


class Compiled(NamedTuple):
    """What ``compile_onnx`` wrote."""

    package: str
    target: tvm.target.Target
    kernels: list[KernelSpec]


def quiet_tvm_loggers() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _check_records(path, target) -> str:
    """The tuning log's path, after every record was checked for ``target`` (or "")."""
    if not path:
        return ""
    if not Path(path).is_file():
        raise UserError(f"{path}: tuning records file does not exist; check --tuning-records")
    try:
        check_records(path, target)
    except RecordsError as err:
        raise UserError(str(err)) from None
    return str(path)


def load_checked(model_path, input_shapes: dict | None, progress: Progress) -> TVMCModel:
    """The ONNX model, loaded by tvmc after every check that needs no loading has passed."""
    user_inputs.check_onnx(model_path, input_shapes)
    with progress.stage(f"loading {model_path}"):
        return user_inputs.load_onnx(model_path, input_shapes)


def compile_onnx(
    model_path,
    output,
    target: str | None = None,
    input_shapes: dict | None = None,
    tuning_records=None,
    progress: Progress | None = None,
    force: bool = False,
    algorithm: str = "auto",
    precision: str = "default",
) -> Compiled:
    """Compile the ONNX model at ``model_path`` with tvm_fuse into the tvmc package ``output``.

    ``target`` is an llvm target string (default: the host CPU), ``input_shapes`` a dict as
    ``tvmc``'s ``--input-shapes`` gives, ``tuning_records`` an AutoTVM log. An existing
    ``output`` is replaced only if it is a tvmc package (or ``force``), never if it is the model.
    """
    progress = progress or Progress()
    llvm = user_inputs.check_target(target)
    records = _check_records(tuning_records, llvm)
    user_inputs.check_output(output, model_path, force)
    with output_files.scratch_dir(output) as scratch:
        model = load_checked(model_path, input_shapes, progress)
        with progress.stage("optimizing with the tvm_fuse pipeline"):
            optimized = pass_pipeline(
                model.mod, model.params, algorithm=algorithm, precision=precision
            )
            kernels = describe(optimized)
        with progress.stage(f"building for {llvm} ({len(kernels)} fused kernels)"):
            built = os.path.join(scratch, Path(output).name)
            # TopHub off (tvmc's build would consult it without records), the weight prefetch on
            with dispatch.build_context(), lowering_in_build():
                compiler.compile_model(
                    TVMCModel(optimized, {}), str(llvm), tuning_records=records, package_path=built
                )
            apply_to_package(built)  # tvm_fuse's memory plan, where smaller than TVM's
        with progress.stage(f"writing {output}"):
            os.replace(built, output)
    return Compiled(str(output), llvm, kernels)
