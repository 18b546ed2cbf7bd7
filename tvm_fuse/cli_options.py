"""Command-line options shared by the ``tvm-fuse`` subcommands, spelled as tvmc spells them.

Where it sits: under ``cli`` and ``tuning.cli``, which build their parsers from it. It imports
no TVM (``tvm-fuse --help`` must answer at once); ``--input-shapes`` is parsed whole by
``shape_text``. ``-v`` follows tvmc: each one lets more of TVM's log through.
"""

from __future__ import annotations

import argparse
import logging

from .shape_text import parse_input_shapes


def add_model_options(command: argparse.ArgumentParser, quiet: bool = True) -> None:
    """The ONNX model, ``--target``, ``--input-shapes``, ``-v`` and (``quiet``) ``-q``."""
    command.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    command.add_argument(
        "--target",
        help="llvm target string (default: this CPU, e.g. 'llvm -mcpu=znver3'; "
        "'-mcpu=native' means this CPU too)",
    )
    command.add_argument(
        "--input-shapes",
        type=parse_input_shapes,
        help='static input shapes, tvmc syntax: "data:[1,3,224,224] other:[1,10]"',
    )
    if quiet:
        command.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_verbosity(command, sub=True)


def add_algorithm_options(command: argparse.ArgumentParser) -> None:
    """``--algorithm`` and ``--precision``: the graph half's choice of Winograd per conv."""
    command.add_argument(
        "--algorithm",
        choices=["auto", "direct"],
        default="auto",
        help="auto: Winograd for the 3x3 convs (stride 1 or 2) where the cost model expects it "
        "to pay (default); direct: the direct kernel everywhere",
    )
    command.add_argument(
        "--precision",
        choices=["default", "high"],
        default="default",
        help="Winograd tiles allowed: default F(2x2) and F(4x4); high F(2x2) only",
    )


def add_verbosity(command: argparse.ArgumentParser, sub: bool = False) -> None:
    """tvmc's ``-v``/``--verbose`` (repeatable); on a subcommand it adds to the top level's."""
    command.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if sub else 0,
        help="show TVM's warnings (-vv: info, -vvv: debug)",
    )


def apply_verbosity(args, loggers) -> None:
    """Set TVM's ``loggers`` to errors only, or each ``-v`` one level lower, as tvmc does."""
    verbose = getattr(args, "verbose", 0)
    level = max(logging.ERROR - 10 * verbose, logging.DEBUG)
    if verbose:
        logging.basicConfig(level=level, format="%(name)s: %(levelname)s: %(message)s")
    for name in loggers:
        logging.getLogger(name).setLevel(level)


def add_backend_option(command: argparse.ArgumentParser) -> None:
    """``--backend``: Relay (TVM 0.19) or Relax (apache-tvm 0.27); default: the installed TVM's."""
    command.add_argument(
        "--backend",
        choices=["relay", "relax"],
        help="relay (TVM 0.19) or relax (apache-tvm 0.27, tvm_fuse.relax); default: the one the "
        "installed TVM has",
    )
