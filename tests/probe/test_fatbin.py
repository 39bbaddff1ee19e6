"""The GPU architectures of a CUDA extension, read from its .nv_fatbin section, and the rule
facts built on them: a flash-attn built without Blackwell code is caught from the file itself."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import List, Tuple

import pytest

from doctor.probe.fatbin import FATBIN_MAGIC, archs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue
from doctor.snapshot import facts_from_snapshot
from doctor.workload import default_workload


def _entry(kind: int, sm: int, payload: bytes) -> bytes:
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<I", head, 28, sm)
    return bytes(head) + payload


def _container(entries: List[Tuple[int, int]]) -> bytes:
    body = b"".join(_entry(k, sm, b"\xab" * 40) for k, sm in entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(fatbin: bytes) -> bytes:
    """A minimal 64-bit little-endian ELF: null, .shstrtab and .nv_fatbin sections."""
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    strtab_off = data_off + len(fatbin)
    shoff = (strtab_off + len(names) + 7) // 8 * 8
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 1)
    body = bytes(head) + fatbin + names
    body += b"\0" * (shoff - len(body))
    sections = bytes(64)  # SHT_NULL
    sections += struct.pack("<IIQQQQ", 1, 3, 0, 0, strtab_off, len(names)).ljust(64, b"\0")
    sections += struct.pack("<IIQQQQ", 11, 1, 0, 0, data_off, len(fatbin)).ljust(64, b"\0")
    return body + sections


def test_reads_cubins_and_ptx_of_every_container(tmp_path: Path) -> None:
    so = tmp_path / "flash_attn_2_cuda.so"
    # two translation units, padding between them as the linker leaves it
    so.write_bytes(_elf(_container([(2, 80), (2, 90)]) + b"\0" * 8 + _container([(2, 80), (2, 90), (1, 90)])))
    assert archs(str(so)) == (("sm_80", "sm_90", "compute_90"), None)


def test_not_an_extension_says_why(tmp_path: Path) -> None:
    plain = tmp_path / "x.so"
    plain.write_bytes(b"\x7fELF\x02\x01" + b"\0" * 200)
    got, why = archs(str(plain))
    assert got is None and why and "no .nv_fatbin" in why
    got, why = archs(str(tmp_path / "missing.so"))
    assert got is None and why


def test_damaged_entry_sizes_end_in_bounded_time(tmp_path: Path) -> None:
    bad = bytearray(_container([(2, 80)]))
    struct.pack_into("<I", bad, 16 + 4, 0)  # entry header size 0: would never advance
    so = tmp_path / "bad.so"
    so.write_bytes(_elf(bytes(bad)))
    assert archs(str(so))[0] == ("sm_80",)


def _snapshot(fa_archs: object, sm: str = "12.0") -> dict:
    doc = {
        "packages": {"flash-attn": "2.7.4.post1", "torch": "2.7.1"},
        "env": {},
        "torch": {"version": "2.7.1+cu126", "cuda": "12.6"},
        "gpus": [{"index": 0, "name": "RTX 5090", "compute_capability": sm}],
    }
    if fa_archs is not None:
        doc["cuda"] = {"flash_attn_archs": fa_archs}
    return doc


def _fires(doc: dict, rule_id: str) -> str:
    cat = load_catalogue()
    return diagnose(cat, facts_from_snapshot(doc, source="t"), default_workload()).result(rule_id).status


def test_blackwell_rule_reads_the_extension_when_it_was_read() -> None:
    rule = "FA2-BLACKWELL-NO-PREBUILT-KERNELS"
    # a CUDA 12.6 torch, where the rule would otherwise assume an nvcc below 12.8: the extension
    # itself carries sm_120 (built with a 12.8 toolkit), so no finding
    assert _fires(_snapshot(["sm_80", "sm_90", "sm_100", "sm_120"]), rule) == "passed"
    assert _fires(_snapshot(["sm_80", "sm_90"]), rule) == "fired"
    # not read: the assumption from the torch build stands
    assert _fires(_snapshot(None), rule) == "fired"


def test_cache_answers_until_the_file_changes(tmp_path: Path) -> None:
    import os

    from doctor.probe.fatbin import cached_archs

    so = tmp_path / "ext.so"
    so.write_bytes(_elf(_container([(2, 80)])))
    cache = tmp_path / "cache"
    assert cached_archs(str(so), cache) == (("sm_80",), None)
    assert len(list(cache.glob("fatbin-*.json"))) == 1
    # a rebuilt extension (new size and mtime) is read again, not answered from the cache
    so.write_bytes(_elf(_container([(2, 80), (2, 120)])))
    os.utime(so, ns=(1, 2))
    assert cached_archs(str(so), cache) == (("sm_80", "sm_120"), None)


def test_a_damaged_zero_filled_section_is_read_in_bounded_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a .nv_fatbin whose first 256 MB hold no container (damage, or a sparse file): the reader
    # stepped 8 bytes a seek through it (32M seeks, minutes); it must find the container after it

    fat = _container([(2, 100)])
    gap = 256 << 20
    so = tmp_path / "flash_attn_2_cuda.so"
    elf = _elf(b"\0" * 8 + fat)
    # move the section's data: keep the header, pad the data region with a sparse hole
    with open(so, "wb") as fh:
        fh.write(elf[:64])
        fh.seek(64 + gap)
        fh.write(fat)
        tail_off = fh.tell()
        names = b"\0.shstrtab\0.nv_fatbin\0"
        fh.write(names)
        shoff = (fh.tell() + 7) // 8 * 8
        fh.seek(shoff)
        fh.write(bytes(64))
        fh.write(struct.pack("<IIQQQQ", 1, 3, 0, 0, tail_off, len(names)).ljust(64, b"\0"))
        fh.write(struct.pack("<IIQQQQ", 11, 1, 0, 0, 64, gap + len(fat)).ljust(64, b"\0"))
        fh.seek(0x28)
        fh.write(struct.pack("<Q", shoff))
    # bounded work, counted rather than timed: 256 MB in 64 KiB reads is 4096 of them; the old
    # 8-byte stepping made 32M seeks
    from doctor.probe import fatbin

    calls = {"n": 0}

    class Counting:
        def __init__(self, fh):  # type: ignore[no-untyped-def]
            self.fh = fh

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self.fh.close()

        def read(self, n=-1):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            return self.fh.read(n)

        def seek(self, *a):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            return self.fh.seek(*a)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.fh, name)  # fileno, tell, ...

    real_open = open
    monkeypatch.setattr(fatbin, "open", lambda path, mode="r": Counting(real_open(path, mode)), raising=False)
    assert archs(str(so)) == (("sm_100",), None)
    assert calls["n"] < 20_000, calls


def test_an_assumed_flash_attn_install_forgets_the_old_extensions_archs() -> None:
    # `check --assume flash-attn==X` and the fix re-check replace the extension: the sm_80/sm_90
    # code read from the installed one must not decide for the assumed wheel (it kept
    # FA2-BLACKWELL-NO-PREBUILT-KERNELS firing for flash-attn 2.8.3's CUDA 12.9 wheel)
    from doctor.assume import apply_pins
    from doctor.model import Pin

    doc = _snapshot(["sm_80", "sm_90"])
    doc["packages"] = {"flash-attn": "2.8.3", "torch": "2.8.0"}
    doc["torch"] = {"version": "2.8.0", "cuda": "12.8"}
    doc["python"] = {"version": "3.11.9"}
    facts = facts_from_snapshot(doc, source="t")
    rule = "FA2-BLACKWELL-NO-PREBUILT-KERNELS"
    cat = load_catalogue()
    assert diagnose(cat, facts, default_workload()).result(rule).status == "fired"
    for pin in (Pin("flash-attn", "2.8.3"), Pin("torch", "2.8.0")):
        after = apply_pins(facts, [pin])
        assert after.cuda.flash_attn_archs is None
        assert diagnose(cat, after, default_workload()).result(rule).status == "passed"


def test_cache_answers_an_unchanged_file_without_reading_it(tmp_path: Path) -> None:
    # the cache test above passes with a cache that never answers: here the file is unchanged
    # and its cached entry is what comes back
    import json

    from doctor.probe.fatbin import cached_archs

    so = tmp_path / "ext.so"
    so.write_bytes(_elf(_container([(2, 80)])))
    cache = tmp_path / "cache"
    assert cached_archs(str(so), cache) == (("sm_80",), None)
    (entry,) = cache.glob("fatbin-*.json")
    entry.write_text(json.dumps(["sm_90"]), encoding="utf-8")
    assert cached_archs(str(so), cache) == (("sm_90",), None)


def test_a_damaged_section_table_size_allocates_nothing_large(tmp_path: Path) -> None:
    # a 64-byte file whose header claims 65535 section headers of 65535 bytes: fh.read() of that
    # size allocated 4 GiB first (MemoryError, a traceback, under a 2 GiB address-space limit)
    import subprocess
    import sys

    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<HHH", head, 0x3A, 65535, 65535, 1)
    so = tmp_path / "bad.so"
    so.write_bytes(bytes(head))
    code = (
        "import resource, sys; from doctor.probe.fatbin import archs; "
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "got, why = archs(sys.argv[1]); assert got is None and why, (got, why)"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code, str(so)], cwd=root, env={"PYTHONPATH": str(root)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]


def test_flash_attn_1x_extension_is_the_one_read() -> None:
    """flash-attn 0.2.x/1.x build the extension flash_attn_cuda (v1.0.9 flash_attn_interface.py),
    2.x flash_attn_2_cuda: the probe reads the one of the installed release (sample 40 row 15)."""
    from doctor.probe.collect import _flash_attn_extension
    from doctor.probe.packages import Dist, PackageScan

    def scan(version: str) -> PackageScan:
        dist = Dist(name="flash-attn", version=version, metadata=Path("/x/METADATA"), site_dir="/x")
        mods = {"flash_attn_cuda": "/x/flash_attn_cuda.so", "flash_attn_2_cuda": "/x/flash_attn_2_cuda.so"}
        return PackageScan(dists={"flash-attn": dist}, skipped=(), modules=mods, paths=("/x",))

    assert _flash_attn_extension(scan("1.0.9")) == ("/x/flash_attn_cuda.so", "flash_attn_cuda")
    assert _flash_attn_extension(scan("0.2.8")) == ("/x/flash_attn_cuda.so", "flash_attn_cuda")
    assert _flash_attn_extension(scan("2.8.3")) == ("/x/flash_attn_2_cuda.so", "flash_attn_2_cuda")
    only_2 = PackageScan(dists=scan("1.0.9").dists, skipped=(), modules={"flash_attn_2_cuda": "/x/a.so"}, paths=("/x",))
    assert _flash_attn_extension(only_2) == (None, "flash_attn_cuda")
