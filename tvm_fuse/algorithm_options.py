"""The ``algorithm`` and ``precision`` options of both backends' build, optimize and pipeline.

``algorithm``: ``"auto"`` (each 3x3 conv of stride 1 or 2 runs as Winograd where the cost model,
``schedules.winograd_tiling``, expects it to pay) or ``"direct"`` (never Winograd).
``precision``: ``"default"`` (F(2x2) and F(4x4)) or ``"high"`` (F(2x2) only: its error is ~10x
smaller). Plain Python, so that the Relay and the Relax backend check and read them alike.
"""

from __future__ import annotations

from .errors import UserError

#: The algorithms a build may ask for.
ALGORITHMS = ("auto", "direct")
#: The Winograd tiles each precision allows.
PRECISIONS = {"default": (2, 4), "high": (2,)}


def check_options(algorithm: str, precision: str) -> None:
    """One clear error for an unknown ``algorithm`` or ``precision``."""
    if algorithm not in ALGORITHMS:
        raise UserError(
            f"tvm_fuse: unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}"
        )
    if precision not in PRECISIONS:
        raise UserError(
            f"tvm_fuse: unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
        )


def winograd_tiles(algorithm: str, precision: str) -> tuple[int, ...]:
    """The Winograd tiles the options allow (none for ``"direct"``), checked first."""
    check_options(algorithm, precision)
    return () if algorithm == "direct" else PRECISIONS[precision]
