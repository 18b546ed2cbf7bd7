"""``tvm-fuse tune MODEL.onnx -o LOG --trials N [--rpc-tracker HOST:PORT --rpc-key K]``.

``add_cli(subparsers)`` defines the subcommand on ``tvm_fuse.cli``'s parser; its handler loads
the model with tvmc's own loader (``user_inputs.load_onnx``), tunes it (``tuner.tune``) and
turns a bad model, target, tracker or key into a one-line ``UserError``. The heavy modules are
imported when the command runs, so that ``tvm-fuse --help`` stays fast. The flags are tvmc
tune's where they mean the same (``-o``, ``--rpc-tracker``, ``--rpc-key``, ``--trials``,
``--tuner``, ``--timeout``); ``--log`` and ``--tracker`` stay as aliases.
"""

from __future__ import annotations

import importlib.util

from ..cli_options import add_model_options, apply_verbosity
from ..errors import UserError
from ..progress import Progress


def add_cli(subparsers) -> None:
    """Add the ``tune`` subcommand to an argparse ``subparsers`` (``run`` is its handler)."""
    tune = subparsers.add_parser(
        "tune", help="tune the fused kernels of an ONNX model (Relay: AutoTVM; Relax: tile search)"
    )
    add_model_options(tune, quiet=False)
    tune.add_argument(
        *("-o", "--output", "--log"),
        dest="log",
        required=True,
        metavar="PATH",
        help="AutoTVM log to append the records to (Relax: JSON records to write or update)",
    )
    tune.add_argument("--trials", type=int, default=64, help="measurements per kernel (64)")
    tune.add_argument(
        "--tuner",
        choices=["xgb", "ga", "random", "grid"],
        help="search strategy (default: xgb with xgboost installed, else ga)",
    )
    tune.add_argument(
        "--rpc-tracker",
        "--tracker",
        dest="tracker",
        metavar="HOST:PORT",
        help="measure on the devices of this RPC tracker (with --rpc-key)",
    )
    tune.add_argument("--rpc-key", metavar="KEY", help="device key of the tracker's servers")
    tune.add_argument("--timeout", type=float, default=10.0, help="seconds per measurement (10)")
    tune.set_defaults(run=run)


def run(args, _extra=None) -> int:
    """The ``tune`` handler: 0 when every kernel was tuned; a UserError for bad input."""
    # pylint: disable-next=import-outside-toplevel  (keeps --help fast)
    from .. import interrupts, package, user_inputs
    from . import records, rpc, tuner  # pylint: disable=import-outside-toplevel

    if args.trials < 1:
        raise UserError(f"--trials {args.trials}: give at least 1 measurement per kernel")
    _check_flags(args)
    if not args.timeout > 0:
        raise UserError(f"--timeout {args.timeout}: give the seconds a measurement may take")
    apply_verbosity(args, package.QUIET_LOGGERS)
    target = user_inputs.check_target(args.target)
    user_inputs.check_log(args.log, args.model)
    model = package.load_checked(args.model, args.input_shapes, Progress())
    kept = []  # the records in the log, for the line an interruption prints
    interrupts.note(lambda: f"{len(kept)} tuning records kept in {args.log} (all valid)")
    try:
        done = tuner.tune(
            model.mod,
            model.params,
            log_file=args.log,
            n_trial=args.trials,
            target=target,
            tuner=args.tuner,
            tracker=args.tracker,
            key=args.rpc_key,
            timeout=args.timeout,
            callbacks=[lambda _tuner, inputs, _results: kept.extend(inputs)],
        )
    except (rpc.TrackerError, records.RecordsError, ValueError) as err:
        raise UserError(str(err)) from None
    print(f"wrote {done.records_written} records for {len(done.tasks)} kernels to {args.log}")
    print(f"build with them: tvm-fuse compile {args.model} --tuning-records {args.log}")
    return 0


def _check_flags(args) -> None:
    """Flag combinations the tuner would refuse, as errors that name the flags."""
    if bool(args.tracker) != bool(args.rpc_key):
        given, missing = (
            ("--rpc-tracker", "--rpc-key") if args.tracker else ("--rpc-key", "--rpc-tracker")
        )
        raise UserError(
            f"{given} needs {missing} too: measuring through a tracker takes its address "
            "(--rpc-tracker HOST:PORT) and the device key (--rpc-key KEY)"
        )
    if args.tuner == "xgb" and importlib.util.find_spec("xgboost") is None:
        raise UserError("--tuner xgb needs xgboost: pip install 'tvm_fuse[tune]' (or --tuner ga)")
