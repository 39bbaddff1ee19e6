"""Which GPU architectures a CUDA extension carries code for, read from its ELF file.

nvcc embeds the device code of each translation unit as a fat binary in the `.nv_fatbin`
section: a run of containers (16-byte header: magic, version, header size, payload size), each
holding entries with a small header (kind: 1 PTX, 2 cubin; the SM number at byte 28) followed by
their payload. Only those headers are read (a seek and a few bytes per entry), never the code:
libtorch_cuda.so (456 MB, thousands of containers) took 0.37 s cold on an H100 host
(benchmarks/results/fatbin/), and the answer is cached. The result has torch.cuda.get_arch_list()'s form:
"sm_80" for a cubin, "compute_90" for PTX.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO, List, Optional, Set, Tuple

from doctor.cachedir import write_json
from doctor.probe.cache import fingerprint

FATBIN_MAGIC = 0xBA55ED50
_KIND = {1: "compute", 2: "sm"}
MAX_ENTRIES = 200_000  # a bound on any input: torch's libtorch_cuda has a few thousand
_ELF64_LE = b"\x7fELF\x02\x01"


def _section(fh: BinaryIO, name: bytes) -> Optional[Tuple[int, int]]:
    """(offset, size) of the named section of a 64-bit little-endian ELF file."""
    head = fh.read(64)
    if len(head) < 64 or not head.startswith(_ELF64_LE):
        return None
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shentsize < 64 or not 0 < shnum < 65536 or shstrndx >= shnum:
        return None
    # a damaged header can claim 65535 entries of 65535 bytes: read no more than the file holds
    # (fh.read(n) allocates n bytes first: 4 GiB, a MemoryError under a ulimit)
    file_size = os.fstat(fh.fileno()).st_size
    if shoff + shentsize * shnum > file_size:
        return None
    fh.seek(shoff)
    table = fh.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    rows = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = rows[shstrndx]
    if str_size > 1 << 24 or str_off + str_size > file_size:
        return None
    fh.seek(str_off)
    names = fh.read(str_size)
    for sh_name, sh_type, _flags, _addr, offset, size in rows:
        if sh_type == 8:  # SHT_NOBITS: no bytes in the file
            continue
        end = names.find(b"\0", sh_name)
        if names[sh_name:end if end >= 0 else None] == name:
            return offset, size
    return None


CACHE_FORMAT = 1


def cached_archs(path: str, cache_dir: Optional[Path]) -> Tuple[Optional[Tuple[str, ...]], Optional[str]]:
    """archs(path), remembered in `cache_dir` by the file's path, size and mtime (a large
    extension costs 0.1-0.4 s cold; a rebuilt or reinstalled one misses the cache)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    key = fingerprint({"format": CACHE_FORMAT, "path": os.path.realpath(path), "size": st.st_size, "mtime": st.st_mtime_ns})[:24]
    name = f"fatbin-{key}.json"
    if cache_dir is not None:
        try:
            hit = json.loads((cache_dir / name).read_text(encoding="utf-8"))
            if isinstance(hit, list) and all(isinstance(a, str) for a in hit) and hit:
                return tuple(hit), None
        except (OSError, ValueError):
            pass
    got, why = archs(path)
    if got is not None:
        write_json(cache_dir, name, list(got), prune_pattern="fatbin-*.json")
    return got, why


_CHUNK = 1 << 16
_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)


def _next_magic(fh: BinaryIO, pos: int, end: int) -> int:
    """The first 8-aligned (relative to the section) offset at or after `pos` that holds the
    fat-binary magic, or `end`."""
    while pos + 16 <= end:
        fh.seek(pos)
        chunk = fh.read(min(_CHUNK, end - pos))
        if len(chunk) < 16:
            return end
        at = chunk.find(_MAGIC_BYTES)
        while at >= 0 and at % 8:
            at = chunk.find(_MAGIC_BYTES, at + 1)
        if at >= 0:
            return pos + at
        pos += max(8, (len(chunk) - 8) // 8 * 8)
    return end


def archs(path: str) -> Tuple[Optional[Tuple[str, ...]], Optional[str]]:
    """The architectures the extension at `path` has code for, sorted ("sm_80", "compute_90"),
    or None and why they could not be read."""
    try:
        with open(path, "rb") as fh:
            where = _section(fh, b".nv_fatbin")
            if where is None:
                return None, f"{path}: no .nv_fatbin section (not a 64-bit ELF CUDA extension)"
            start, size = where
            found: Set[str] = set()
            pos, end, entries = start, start + size, 0
            while pos + 16 <= end:
                fh.seek(pos)
                magic, _version, header_size, payload = struct.unpack("<IHHQ", fh.read(16))
                if magic != FATBIN_MAGIC:
                    # padding between containers, or damage: find the next magic a chunk at a
                    # time (8 bytes a seek made a damaged or zero-filled section of hundreds of
                    # MB cost minutes)
                    pos = _next_magic(fh, pos + 8, end)
                    continue
                entry, stop = pos + header_size, min(pos + header_size + payload, end)
                while entry + 32 <= stop:
                    entries += 1
                    if entries > MAX_ENTRIES:
                        return None, f"{path}: more than {MAX_ENTRIES} fat-binary entries: not read"
                    fh.seek(entry)
                    raw = fh.read(32)
                    if len(raw) < 32:
                        break
                    kind, _v, ehead, esize = struct.unpack_from("<HHIQ", raw, 0)
                    sm, = struct.unpack_from("<I", raw, 28)
                    if kind in _KIND and 10 <= sm < 1000:
                        found.add(f"{_KIND[kind]}_{sm}")
                    if ehead < 32:
                        break  # a damaged entry: stop this container rather than loop
                    entry += ehead + esize
                pos = max(stop, pos + 16)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    except struct.error:
        return None, f"{path}: truncated fat binary"
    if not found:
        return None, f"{path}: its .nv_fatbin names no architecture"
    order: List[str] = sorted(found, key=lambda a: (int(a.rpartition("_")[2]), a.startswith("compute")))
    return tuple(order), None
