"""The byte format of one stored chunk (one host-pool slot / one disk block): layout and byte accounting.

The one place where bytes per chunk are computed, for every storage format; plain Python with no torch,
so the planner, ``worldpager inspect`` (``engine.model.facts``), the store and the benchmarks all
import the same arithmetic. The tensor side (quantise a chunk into a block, read it back, typed views
of a block's sections) is ``engine.memory.quant``.

A chunk block holds the self-attention K and V of one chunk for every layer (keys after the model's
time rotation, or before it with ``--kv-keys pre-rope``: the same bytes, a different meaning, which a
save point records), as ``layers`` equal layer records one after another; layer ``l`` starts at
``l * layer_bytes``. Inside a record the sections follow in this order, each starting on a 16-byte
boundary (``ALIGN``; a section whose size is not a multiple of 16 is followed by zero padding — none is
needed for any named model):

quantised (``bits`` ∈ {2, 4, 8}; ``T`` tokens, ``C = heads * head_dim`` channels, ``G = value_group``,
``P = 8 // bits`` codes per byte, all little-endian):

====  =========  ======================  =====================================================
 #    section    dtype, shape            meaning
====  =========  ======================  =====================================================
 0    k_codes    uint8 [T, C/P]          key codes, row per token, channel ``j*P+s`` in bits s*b..
 1    k_scale    fp16  [C]               per-channel key scale (one group = the chunk's T tokens)
 2    k_zero     fp16  [C]               per-channel key zero point (the group minimum)
 3    v_codes    uint8 [T, C/P]          value codes, same packing as keys
 4    v_scale    fp16  [T, C/G]          per-token value scale, group g = channels g*G .. g*G+G-1
 5    v_zero     fp16  [T, C/G]          per-token value zero point
====  =========  ======================  =====================================================

For mg2-universal int4 (T = 2640, C = 1536, G = 64, 30 layers) the offsets inside a layer record are
k_codes 0 (+2,027,520) · k_scale 2,027,520 (+3,072) · k_zero 2,030,592 (+3,072) · v_codes 2,033,664
(+2,027,520) · v_scale 4,061,184 (+126,720) · v_zero 4,187,904 (+126,720); layer_bytes = 4,314,624;
``nbytes`` = 30 × 4,314,624 = **129,438,720** (the paper's 129.4 MB); ``slot_bytes`` (rounded up to
4096 for O_DIRECT and pool slots) = 129,441,792. int8 = 251,089,920 B, int2 = 68,613,120 B.

unquantised (``bits = 16``; exact round trip when the KV dtype equals ``raw_dtype``):
``k`` then ``v``, each ``raw_dtype [T, C]`` row-major (mg2-universal bf16: 486,604,800 B).

The quantisation contract (grouping, rounding, error bound) is :mod:`engine.kernels.reference`'s.
Shapes come from a model's :class:`~engine.facts.layout.KVLayout`, never from a model configuration.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError
from engine.facts.layout import KVLayout

ALIGN = 16            # section alignment: fp16 views need 2, vector loads like 16
SLOT_ALIGN = 4096     # O_DIRECT block / pool slot granularity
QUANT_BITS = (2, 4, 8)
RAW_BITS = 16
RAW_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
DEFAULT_VALUE_GROUP = 64   # channels per value scale/zero group (KIVI's group size)


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Section:
    """One tensor inside a layer record."""

    name: str
    offset: int                # bytes from the start of the layer record
    nbytes: int
    dtype: str                 # torch dtype name
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ChunkFormat:
    """Shape facts + storage format of one chunk block; see the module docstring for the layout."""

    layers: int
    tokens: int
    heads: int
    head_dim: int
    bits: int = 4
    value_group: int = DEFAULT_VALUE_GROUP
    raw_dtype: str = "bfloat16"       # element type when bits == 16

    def __post_init__(self) -> None:
        if self.bits not in QUANT_BITS + (RAW_BITS,):
            raise ConfigError(f"KV storage bits={self.bits} (choose from 2, 4, 8, 16 = unquantised)")
        if self.bits == RAW_BITS:
            if self.raw_dtype not in RAW_ITEMSIZE:
                raise ConfigError(f"unquantised KV dtype {self.raw_dtype!r} "
                                  f"(choose from {', '.join(RAW_ITEMSIZE)})")
            return
        c, g, per = self.channels, self.value_group, 8 // self.bits
        if g <= 0 or c % g or g % per or g & (g - 1):
            raise ConfigError(f"value_group={g} must be a power of two dividing {c} channels "
                              f"and a multiple of {per}")

    @classmethod
    def from_layout(cls, layout: KVLayout, bits: int = 4, value_group: int = DEFAULT_VALUE_GROUP,
                    raw_dtype: str = "bfloat16") -> "ChunkFormat":
        """The block format of one chunk of ``layout`` stored with ``bits`` per value."""
        return cls(layers=layout.layers, tokens=layout.tokens_per_chunk, heads=layout.heads,
                   head_dim=layout.head_dim, bits=bits, value_group=value_group, raw_dtype=raw_dtype)

    @property
    def channels(self) -> int:
        return self.heads * self.head_dim

    @property
    def quantized(self) -> bool:
        return self.bits != RAW_BITS

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections of one layer record, in storage order, with offsets."""
        t, c = self.tokens, self.channels
        if self.quantized:
            row = c * self.bits // 8
            ng = c // self.value_group
            specs = [("k_codes", "uint8", (t, row)), ("k_scale", "float16", (c,)),
                     ("k_zero", "float16", (c,)), ("v_codes", "uint8", (t, row)),
                     ("v_scale", "float16", (t, ng)), ("v_zero", "float16", (t, ng))]
        else:
            specs = [("k", self.raw_dtype, (t, c)), ("v", self.raw_dtype, (t, c))]
        out, offset = [], 0
        for name, dtype, shape in specs:
            n = _itemsize(dtype)
            for d in shape:
                n *= d
            out.append(Section(name, offset, n, dtype, shape))
            offset = _align(offset + n, ALIGN)
        return tuple(out)

    @property
    def layer_bytes(self) -> int:
        last = self.sections[-1]
        return _align(last.offset + last.nbytes, ALIGN)

    @property
    def nbytes(self) -> int:
        """Bytes of one chunk block (no slot rounding)."""
        return self.layers * self.layer_bytes

    @property
    def slot_bytes(self) -> int:
        """``nbytes`` rounded up to 4096: the size of a pool slot and of a disk block."""
        return _align(self.nbytes, SLOT_ALIGN)

    @property
    def name(self) -> str:
        return self.raw_dtype if not self.quantized else f"int{self.bits}"


def _itemsize(dtype: str) -> int:
    return 1 if dtype == "uint8" else RAW_ITEMSIZE[dtype]


def byte_figures(layout: KVLayout, value_group: int = DEFAULT_VALUE_GROUP) -> dict[str, int]:
    """Bytes of one chunk block per storage format (for ``worldpager inspect`` and the planner)."""
    out = {"bf16": ChunkFormat.from_layout(layout, bits=RAW_BITS).nbytes}
    for bits in (8, 4, 2):
        out[f"int{bits}"] = ChunkFormat.from_layout(layout, bits=bits, value_group=value_group).nbytes
    return out
