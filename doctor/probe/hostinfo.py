"""This interpreter and operating system: Python version, OS, CPU architecture, libc."""

from __future__ import annotations

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
    libc: Optional[str]  # "glibc 2.35"; None on musl / non-Linux


def _libc() -> Optional[str]:
    # os.confstr answers at once; platform.libc_ver() reads the whole interpreter binary
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None
    return value or None


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
        libc=_libc(),
    )
