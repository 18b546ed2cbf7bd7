"""Command-line options shared by the ``tvm-fuse`` subcommands, spelled as tvmc spells them.

Where it sits: under ``cli`` and ``tuning.cli``, which build their parsers from it. It imports
no TVM (``tvm-fuse --help`` must answer at once): the input-shape parser is tvmc's own, loaded
when a value is parsed. ``-v`` follows tvmc: each one lets more of TVM's log through.
"""

from __future__ import annotations

import argparse
import logging


def input_shapes(text: str) -> dict:
    """``--input-shapes`` in tvmc's syntax, parsed by tvmc (an argparse error when malformed)."""
    # pylint: disable-next=import-outside-toplevel  (imports TVM: only when the flag is given)
    from tvm.driver.tvmc.shape_parser import parse_shape_string

    return parse_shape_string(text)


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
        type=input_shapes,
        help='static input shapes, tvmc syntax: "data:[1,3,224,224] other:[1,10]"',
    )
    if quiet:
        command.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_verbosity(command, sub=True)


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
