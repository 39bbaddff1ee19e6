"""This interpreter and operating system: Python version, OS, CPU architecture, libc."""

from __future__ import annotations

import glob
import os
import platform
import sys
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class HostInfo:
    host: str
    python_version: str
    implementation: str
    executable: str
    os: str
    arch: str
    libc: Optional[str]  # "glibc 2.35"; "musl" / "non-glibc" on other Linux C libraries; None off Linux


def _libc(system: str) -> Optional[str]:
    # os.confstr answers at once; platform.libc_ver() reads the whole interpreter binary
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        value = None
    if value:
        return value
    if system != "Linux":
        return None
    # Linux without glibc: say so, so that "not glibc" is a known answer and not a missing one
    return "musl" if glob.glob("/lib/ld-musl-*.so.1") else "non-glibc"


def probe() -> HostInfo:
    # platform.uname(), not os.uname(): the latter does not exist on Windows
    uname = platform.uname()
    return HostInfo(
        host=uname.node,
        python_version=".".join(str(p) for p in sys.version_info[:3]),
        implementation=platform.python_implementation(),
        executable=sys.executable,
        os=f"{uname.system} {uname.release}".strip(),
        arch=uname.machine,
        libc=_libc(uname.system),
    )
