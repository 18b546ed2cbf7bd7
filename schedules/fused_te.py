"""The fast fused kernel's computation as TE, apart from any schedule: shared by both backends.

The Relay backend's AutoTVM template (``schedules.conv2d_nhwc_fused``) and the Relax backend's
TensorIR kernel (``tvm_fuse.relax.kernel``, through ``te.create_prim_func``) compute exactly this:
NHWC data, the packed ``[Co/VL, Kh, Kw, Ci, VL]`` weight, the epilogue of ``schedules.epilogue``.
The two tile shapes of the tile model change the computation itself, so they are arguments here:
``owb`` (the Wo tile, for the width the conv is computed on) and ``flat`` (one Ho*Wo pixel axis
with whole channel vectors). This module imports TE and TOPI only (no AutoTVM, no Relay).
"""

from tvm import te

from ..spec import KernelSpec
from .epilogue import apply_epilogue
from .te_utils import pad_for_tiles

#: Tag of the conv stage, by which the schedules find it.
CONV_TAG = "conv2d_nhwc_fused_packed"


def compute(spec: KernelSpec, data, weight, bias, residual, owb: int, flat: bool):
    """TE of the fast kernel of ``spec`` on the packed ``weight``, for a tile of ``owb`` pixels
    along Wo (``flat``: along the flattened Ho*Wo axis)."""
    ci = spec.in_channels
    kh, kw = spec.kernel_size
    ho, wo = spec.out_hw
    lanes, channels, out_dtype = spec.lanes, spec.out_channels, spec.out.dtype
    co_vectors = spec.weight.shape[spec.weight.layout.index("O")]
    (sh, sw), (dh, dw) = spec.strides, spec.dilation
    n = spec.data.shape[0]
    wo_pad = wo if flat else -(-wo // owb) * owb
    # the Wo tile's columns past Wo: padded for, or read again from column Wo-1 (clamp)
    data, clamp = pad_for_tiles(data, spec, wo_pad)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, ci), name="rc")

    def product(b, y, x, c):
        if clamp:
            x = te.min(x, wo - 1)
        return data[b, y * sh + ry * dh, x * sw + rx * dw, rc].astype(out_dtype) * weight[
            c // lanes, ry, rx, rc, c % lanes
        ].astype(out_dtype)

    if flat:  # one pixel axis p = y * Wo + x, padded to whole tiles (clamped: no extra rows);
        # channels blocked [Co/VL, VL], so that the epilogue's demand covers whole vectors
        pixels = ho * wo
        shape = (n, -(-pixels // owb) * owb, co_vectors, lanes)

        def element(b, p, cv, cl):
            q = te.min(p, pixels - 1) if shape[1] != pixels else p
            return te.sum(product(b, q // wo, q % wo, cv * lanes + cl), axis=[ry, rx, rc])

        conv = te.compute(shape, element, name="conv", tag=CONV_TAG)
        acc = te.compute(
            (n, ho, wo, channels),
            lambda b, y, x, c: conv[b, y * wo + x, c // lanes, c % lanes],
            name="acc",
        )
    else:
        conv = te.compute(
            (n, ho, wo_pad, co_vectors * lanes),
            lambda b, y, x, c: te.sum(product(b, y, x, c), axis=[ry, rx, rc]),
            name="conv",
            tag=CONV_TAG,
        )
        acc = te.compute((n, ho, wo, channels), lambda *i: conv(*i), name="acc")
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)
