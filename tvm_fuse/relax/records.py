"""The Relax backend's tuning records: one JSON file, checked whole before any record is used.

``tvm_fuse.relax.tune`` writes it; ``tvm_fuse.relax.build(..., tuning_records=PATH)`` applies it
with :func:`apply`, which rebuilds each fused kernel that has a record with the record's tiles
instead of the tile model's. The file holds the target it was measured on and, per kernel (its
``KernelSpec``), the tiles chosen, their time and every trial. Refused with one ``UserError`` line:
a missing file or one that is not such records (an AutoTVM log, say); records measured for
another target (kind, ``-mcpu`` or ``-mtriple`` differ); tiles the kernel cannot take; a file
with no record for any kernel of the module. Kernels without a record keep the model's tiles.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import tvm

from ..errors import UserError
from ..schedules import tiling
from ..spec import KernelSpec
from . import compat, kernel

FORMAT = "tvm_fuse.relax.tuning/1"
#: PrimFunc attribute saying which tiles a tuned kernel runs ("owb=3 ocb=4 flat=0")
TILES_ATTR = "tvm_fuse.tiles"
#: Target attributes that must agree between the records and the build.
TARGET_ATTRS = ("mcpu", "mtriple")


def is_tunable(spec: KernelSpec | None) -> bool:
    """Whether ``spec`` is a kernel the records tune: the direct fast kernel (packed weight);
    the tiles mean nothing to the generic kernel, to another algorithm or to the depthwise
    kernel (no knobs: ``schedules.depthwise``)."""
    return (
        spec is not None
        and spec.lanes is not None
        and spec.algorithm == "direct"
        and not spec.depthwise
    )


def tiles_text(tiles: tiling.Tiles) -> str:
    return f"owb={tiles.owb} ocb={tiles.ocb} flat={int(tiles.flat)}"


def tiles_to_dict(tiles: tiling.Tiles) -> dict:
    return {"owb": tiles.owb, "ocb": tiles.ocb, "flat": bool(tiles.flat)}


def tiles_refusal(spec: KernelSpec, tiles: tiling.Tiles) -> str | None:
    """Why the fast kernel of ``spec`` cannot run ``tiles``, or None: the knob ranges of the
    Relay template (owb up to ``MAX_OWB``, ocb a divisor of Co/VL up to ``MAX_OCB``), and a flat
    tile only over more than one row."""
    co_vectors = -(-spec.out_channels // spec.lanes)
    if not 1 <= tiles.owb <= tiling.MAX_OWB:
        return f"owb={tiles.owb} is not in 1..{tiling.MAX_OWB}"
    if not (1 <= tiles.ocb <= tiling.MAX_OCB and co_vectors % tiles.ocb == 0):
        return f"ocb={tiles.ocb} does not divide the {co_vectors} channel vectors"
    if tiles.flat and spec.out_hw[0] == 1:
        return "a flat tile needs more than one output row"
    return None


def target_key(target) -> dict:
    target = compat.as_target(target)
    return {"kind": str(target.kind.name)} | {
        name: str(target.attrs.get(name, "")) for name in TARGET_ATTRS
    }


def write(path, target, kernels: list[dict]) -> None:
    """Write ``kernels`` (dicts with a ``spec`` dict) for ``target`` to ``path``, replacing
    the entries of the same specs already there; through a temporary file in the same folder,
    so that an interrupted write leaves the old file whole and nothing else behind."""
    path = Path(path)
    new_specs = {_spec_key(k["spec"]) for k in kernels}
    kept = [k for k in existing(path, target) if _spec_key(k["spec"]) not in new_specs]
    payload = {"format": FORMAT, "target": target_key(target), "kernels": kept + kernels}
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=1)
            out.write("\n")
        os.chmod(temp, _file_mode(path))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def existing(path, target) -> list[dict]:
    """The records already at ``path`` (none without a file), which new records for ``target``
    may join; a UserError for a file that is not records or holds another target's."""
    path = Path(path)
    if not path.exists():
        return []
    old = read(path)
    if old["target"] != target_key(target):
        raise UserError(
            f"{path}: holds records for target {old['target']}, not {target_key(target)}; "
            "write these to another file"
        )
    return old["kernels"]


def _file_mode(path: Path) -> int:
    """The mode of the file at ``path``, or that of a new file (mkstemp's is 0600)."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def read(path) -> dict:
    """The records at ``path`` as written by :func:`write`, or a UserError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory; name a tuning records file such as model.json")
    if not path.is_file():
        raise UserError(f"{path}: tuning records file does not exist")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not tvm_fuse Relax tuning records ({err})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(
            f"{path}: not tvm_fuse Relax tuning records (no format {FORMAT!r}; an AutoTVM log "
            "is the Relay backend's)"
        )
    return payload


def best_tiles(path, target) -> dict[str, tiling.Tiles]:
    """Spec JSON -> tiles of every record at ``path``, each checked against its spec and the
    target; a UserError for the first that does not fit."""
    payload = read(path)
    if payload.get("target") != target_key(target):
        raise UserError(
            f"{path}: records tuned for target {payload.get('target')}, not "
            f"{target_key(target)}: tune again for this target"
        )
    found = {}
    for number, record in enumerate(payload.get("kernels", []), 1):
        try:
            spec = KernelSpec.from_dict(record["spec"])
            chosen = record["tiles"]
            tiles = tiling.Tiles(
                owb=int(chosen["owb"]),
                ocb=int(chosen["ocb"]),
                icb=spec.in_channels,
                flat=bool(chosen["flat"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{path}: record {number} is malformed ({err!r})") from None
        why = tiles_refusal(spec, tiles) if is_tunable(spec) else "not a direct fast kernel"
        if why:
            raise UserError(f"{path}: record {number} cannot be applied: {why}")
        found[spec.to_json()] = tiles
    return found


def apply(mod: tvm.IRModule, path, target) -> tvm.IRModule:
    """``mod`` (after ``LowerFusedConv``) with every fused kernel that has a record at ``path``
    rebuilt with the record's tiles (marked with ``TILES_ATTR``)."""
    records = best_tiles(path, target)
    updates = {}
    kernels = 0
    for gv, func in mod.functions_items():
        spec = kernel.spec_of(func) if isinstance(func, compat.PrimFunc) else None
        if not is_tunable(spec):
            continue
        kernels += 1
        tiles = records.get(spec.to_json())
        if tiles is not None:
            tuned = kernel.prim_func(spec, tiles)
            attrs = {"global_symbol": func.attrs["global_symbol"], TILES_ATTR: tiles_text(tiles)}
            updates[gv] = tuned.with_attrs(attrs)
    if not updates:
        raise UserError(
            f"{path}: none of its {len(records)} records is for one of the model's {kernels} "
            "fused kernels: tune this model (tvm_fuse.relax.tune) for these records"
        )
    out = mod.clone()
    for gv, func in updates.items():
        out.update_func(gv, func)
    return out


def _spec_key(spec: dict) -> str:
    return KernelSpec.from_dict(spec).to_json()
