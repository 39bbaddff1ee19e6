"""Real install metadata from the package index: Requires-Dist, Provides-Extra, file sizes.

What the resolution check (doctor.fix.resolve) and the install commands (doctor.fix.install)
are checked against. Read per release from the file pip would install on Linux x86_64:

* wheels: only the METADATA member, through HTTP range requests on the zip's central
  directory (a 400 MB transformer_engine_cu12 wheel costs a few kilobytes);
* sdists (flash-attn, transformer_engine_torch): the tar.gz is streamed until PKG-INFO.

File lists and sizes come from the PEP 691 JSON simple index (`/simple/NAME/`). Only
requirements on packages the doctor reasons about are kept (TRACKED); their markers stay
as written and are evaluated for the target Python when resolving.
"""

from __future__ import annotations

import io
import json
import re
import struct
import tarfile
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.parser import Parser
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# Requirements on these names are kept in the catalogue; the rest (einops, numpy, ...) are
# outside what the doctor diagnoses.
TRACKED_PREFIXES = ("nvidia-cudnn-cu", "nvidia-nccl-cu", "nvidia-cuda-runtime-cu", "transformer-engine")
TRACKED = ("torch", "triton", "flash-attn", "transformers", "xtuner", "axolotl", "accelerate", "peft", "deepspeed", "trl", "datasets")

# Which releases get metadata (older ones are outside every rule's window).
METADATA_FLOOR = {
    "transformer-engine": "1.9",
    "transformer-engine-cu12": "1.9",
    "transformer-engine-torch": "1.9",
    "transformers": "4.36",
    "flash-attn": "2.5",
    "xtuner": "0.1.0",
    "axolotl": "0.5.0",
    "nvidia-cudnn-cu12": "9.0",
    "nvidia-cudnn-cu13": "9.12",
    # torch's companions: each release pins the torch it was built with exactly (torch==X), so a
    # fix that moves torch moves them too (doctor.fix.companions)
    "torchvision": "0.15",
    "torchaudio": "2.0",
    "xformers": "0.0.20",
    # the training frameworks fixes pin (their Requires-Dist is what a pin of them pulls in)
    "trl": "0.8.0",
    "peft": "0.10.0",
    "accelerate": "0.30.0",
    "deepspeed": "0.14.0",
    "llamafactory": "0.7.1",
    # 2.x too: its wheels cap transformers (<4.41 in 2.0.0-2.0.4 ... <4.48 in 2.5.2-2.6.1), which
    # XTuner sequence-parallel fixes (transformers pins) must respect; 1.x's cap it too (<4.37 in
    # 1.5.0-1.5.3 ... <4.39 in 1.6.2-1.7.3)
    "ms-swift": "1.0.0",
    "verl": "0.2.0",
    "unsloth": "2024.8",
    "unsloth-zoo": "2024.10",
}

Http = Callable[[str, Optional[Tuple[int, int]]], bytes]  # url, byte range (start, end incl.) -> body


def tracked(name: str) -> bool:
    n = canonical(name)
    return n in TRACKED or n.startswith(TRACKED_PREFIXES)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _http(url: str, rng: Optional[Tuple[int, int]] = None) -> bytes:
    headers = {"User-Agent": "attn-doctor", "Accept": "application/vnd.pypi.simple.v1+json"}
    if rng is not None:
        start, end = rng
        headers["Range"] = f"bytes={start}-{end}" if start >= 0 else f"bytes={start}"
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - https index URL
        return bytes(resp.read())


@dataclass(frozen=True)
class FileInfo:
    filename: str
    url: str
    size: int
    version: str


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_SDIST = re.compile(r"^(?P<name>.+)-(?P<ver>[0-9][^-]*)\.(tar\.gz|zip)$")


def index_files(name: str, index: str = "https://pypi.org", http: Http = _http) -> Dict[str, List[FileInfo]]:
    """version -> files on the index (not yanked)."""
    doc = json.loads(http(f"{index.rstrip('/')}/simple/{canonical(name)}/", None).decode("utf-8"))
    out: Dict[str, List[FileInfo]] = {}
    for f in doc.get("files", []):
        if f.get("yanked"):
            continue
        fn = str(f["filename"])
        m = _WHEEL.match(fn) or _SDIST.match(fn)
        if not m:
            continue
        out.setdefault(m.group("ver"), []).append(FileInfo(fn, str(f["url"]), int(f.get("size") or 0), m.group("ver")))
    return out


def pick_file(files: Sequence[FileInfo], python: str = "3.10") -> Optional[FileInfo]:
    """The file pip picks on Linux x86_64 (CPython `python`): a matching wheel, else the sdist."""
    cp = "cp" + python.replace(".", "")
    wheels = []
    for f in files:
        m = _WHEEL.match(f.filename)
        if not m:
            continue
        plat, py = m.group("plat"), m.group("py")
        if not (plat == "any" or ("linux" in plat and "x86_64" in plat)):
            continue
        if not (py.startswith("py3") or cp in py.split(".")):
            continue
        wheels.append(f)
    if wheels:
        return max(wheels, key=lambda f: f.size)
    sdists = [f for f in files if _SDIST.match(f.filename)]
    return sdists[0] if sdists else None


def _wheel_metadata(url: str, size: int, http: Http) -> str:
    """METADATA of a wheel, read through range requests (end of central directory first)."""
    tail_len = min(size, 65536 + 22)
    tail = http(url, (size - tail_len, size - 1))
    eocd = tail.rfind(b"PK\x05\x06")
    if eocd < 0:
        raise ValueError("no zip end record")
    cd_size, cd_offset = struct.unpack("<II", tail[eocd + 12 : eocd + 20])
    start_in_tail = cd_offset - (size - tail_len)
    cd = tail[start_in_tail : start_in_tail + cd_size] if start_in_tail >= 0 else http(url, (cd_offset, cd_offset + cd_size - 1))
    pos = 0
    while pos + 46 <= len(cd):
        if cd[pos : pos + 4] != b"PK\x01\x02":
            break
        method = struct.unpack("<H", cd[pos + 10 : pos + 12])[0]
        csize = struct.unpack("<I", cd[pos + 20 : pos + 24])[0]
        nlen, elen, clen = struct.unpack("<HHH", cd[pos + 28 : pos + 34])
        local = struct.unpack("<I", cd[pos + 42 : pos + 46])[0]
        fname = cd[pos + 46 : pos + 46 + nlen].decode("utf-8", "replace")
        pos += 46 + nlen + elen + clen
        if not re.match(r"^[^/]+\.dist-info/METADATA$", fname):
            continue
        head = http(url, (local, local + 30 + 1024 + csize))
        lnlen, lelen = struct.unpack("<HH", head[26:30])
        data = head[30 + lnlen + lelen : 30 + lnlen + lelen + csize]
        raw = zlib.decompress(data, -15) if method == 8 else data
        return raw.decode("utf-8", "replace")
    raise ValueError("no METADATA in wheel")


def _sdist_metadata(url: str, http: Http) -> str:
    """PKG-INFO of an sdist (the whole tar.gz is read; sdists here are a few MB at most)."""
    body = http(url, None)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if re.match(r"^[^/]+/PKG-INFO$", m.name)]
        if not members:
            raise ValueError("no PKG-INFO in sdist")
        fh = tar.extractfile(members[0])
        assert fh is not None
        return fh.read().decode("utf-8", "replace")


def parse_metadata(text: str) -> Dict[str, Any]:
    msg = Parser().parsestr(text, headersonly=True)
    reqs = [r for r in (msg.get_all("Requires-Dist") or []) if tracked(re.split(r"[\s\[<>=!~;(]", r.strip(), maxsplit=1)[0])]
    extras = sorted({canonical(e) for e in (msg.get_all("Provides-Extra") or [])})
    out: Dict[str, Any] = {"requires_dist": reqs, "provides_extra": extras}
    return out


def release_metadata(files: Sequence[FileInfo], http: Http = _http) -> Optional[Dict[str, Any]]:
    """Requires-Dist (tracked names), Provides-Extra and the file pip installs, with its size."""
    f = pick_file(files)
    if f is None:
        return None
    if f.filename.endswith(".whl"):
        text = _wheel_metadata(f.url, f.size, http)
        kind = "wheel"
    else:
        text = _sdist_metadata(f.url, http)
        kind = "sdist"
    meta = parse_metadata(text)
    meta["file"] = {"name": f.filename, "size": f.size, "kind": kind}
    return meta


def fetch_metadata(
    name: str,
    versions: Sequence[str],
    index: str = "https://pypi.org",
    http: Http = _http,
    workers: int = 8,
) -> Mapping[str, Dict[str, Any]]:
    """version -> metadata for the versions given (those the index has files for)."""
    files = index_files(name, index, http)

    def one(v: str) -> Tuple[str, Optional[Dict[str, Any]]]:
        try:
            return v, release_metadata(files.get(v, ()), http)
        except (OSError, ValueError, tarfile.TarError, zlib.error, struct.error):
            return v, None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        got = list(pool.map(one, [v for v in versions if v in files]))
    return {v: m for v, m in got if m is not None}
