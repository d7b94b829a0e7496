"""The fastpipe pack format: a dataset stored once, memory-mappable, every byte checksummed.

Layout (all integers little-endian; this table is the format's one description, docs/pack-format.md links here):

    offset  size  field
         0     8  magic            b"\\x89FPPACK\\n"
         8     4  version          u32: 2 for raw images and records, 3 for JPEG images (1 still reads)
        12     4  header_crc       u32, zlib.crc32 of bytes [16, data_offset): fields, metadata, index
        16     8  file_size        u64, total bytes; a shorter file is truncated
        24     8  data_offset      u64, where the images start (a multiple of 4096, page aligned)
        32     8  count            u64, number of images (both splits)
        40     4  height           u32, stored image height (records: 1)
        44     4  width            u32, stored image width (records: bytes per record)
        48     4  channels         u32, 3 (RGB) (records: 1)
        52     4  chunk_images     u32, images (records) per checksum chunk (the last may be shorter)
        56     4  meta_size        u32, bytes of the JSON metadata
        60     4  dtype            u32, 1 = uint8 images; 2 = records (version >= 2); 3 = JPEG images (version 3)
        64  meta_size             JSON: classes, dtype, layout, source, settings; records: "fields"
         .  4*count  labels        i32 per image (records: 0)
         .    count  split         u8 per image: 0 = train, 1 = held-out (val)
         .  4*chunks checksums     u32 zlib.crc32 of each chunk's image bytes
         .  8*(count+1) offsets    JPEG only: u64 start of each image's bytes, relative to data_offset,
                                   then the end of the last one
         .        .  zero padding up to data_offset
    data_offset  ...              raw: count*height*width*channels uint8, N x H x W x C (row-major);
                                  records: count records of ``width`` bytes; JPEG: the images'
                                  baseline JPEG files back to back, each decoding to H x W x 3

Version 2 added records (dtype code 2): each record is one sample of any dataset whose samples are
fixed-shape tensors or numbers, its fields at the byte offsets the metadata's "fields" list gives
(records.py). Version 3 added JPEG images (dtype code 3; metadata "codec": "jpeg", "quality",
"chroma"); only JPEG packs carry it, so raw packs stay readable by every fastpipe that reads
version 2. A sharded pack is a folder of such files plus an index (shards.py).
"""
from __future__ import annotations

import struct
import zlib
from typing import Optional, Sequence, Tuple

import numpy as np

MAGIC = b"\x89FPPACK\n"  # a high byte first: a text-mode copy or a stray text file cannot match
FORMAT_VERSION = 2  # raw images and records
JPEG_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
HEADER = struct.Struct("<8sIIQQQIIIIII")  # the fixed 64-byte header above
ALIGN = 4096  # images start on a page boundary so they can be memory-mapped directly
DTYPE_UINT8 = 1  # images: N x H x W x 3 uint8
DTYPE_RECORDS = 2  # records of any fixed layout (version 2)
DTYPE_JPEG = 3  # images as JPEG files (version 3)
DEFAULT_CHUNK_IMAGES = 256
TRAIN, VAL = 0, 1
REPACK = "repack it with `python -m fastpipe.pack SRC OUT` (or delete it: a cached pack is rebuilt)"


def chunks_of(count: int, chunk_images: int) -> int:
    return -(-count // chunk_images)


def index_bytes(meta: bytes, labels: np.ndarray, split: np.ndarray, crcs: Sequence[int],
                offsets: Optional[np.ndarray] = None) -> bytes:
    """The covered bytes after the fixed fields: metadata, labels, split flags, checksums (+ offsets)."""
    body = meta + np.asarray(labels).astype("<i4").tobytes() + np.asarray(split).astype(np.uint8).tobytes()
    body += np.asarray(crcs, dtype="<u4").tobytes()
    return body if offsets is None else body + np.asarray(offsets, dtype="<u8").tobytes()


def data_offset_for(meta_len: int, count: int, chunk_images: int, jpeg: bool) -> int:
    """Where the data starts: after the header and index, rounded up to a page."""
    index_len = meta_len + 5 * count + 4 * chunks_of(count, chunk_images) + (8 * (count + 1) if jpeg else 0)
    return -(-(HEADER.size + index_len) // ALIGN) * ALIGN


def header_region(data_offset: int, data_bytes: int, count: int, shape: Tuple[int, int, int], chunk_images: int,
                  meta: bytes, dtype_code: int, index: bytes) -> bytes:
    """Bytes [0, data_offset) of a pack: the fixed header (its checksum included), the index, padding."""
    version = JPEG_VERSION if dtype_code == DTYPE_JPEG else FORMAT_VERSION
    fields = struct.pack("<QQQIIIIII", data_offset + data_bytes, data_offset, count, *shape, chunk_images,
                         len(meta), dtype_code)  # header bytes 16..64
    covered = fields + index + bytes(data_offset - HEADER.size - len(index))
    return MAGIC + struct.pack("<II", version, zlib.crc32(covered)) + covered
