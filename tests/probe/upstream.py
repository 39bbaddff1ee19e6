"""Real upstream releases for the contract tests, downloaded once and installed into a temp folder.

Files come from PyPI (the simple index gives the URL; the sha256 pinned here must match) and
are kept in $ATTN_DOCTOR_TEST_DOWNLOADS, else <tmp>/attn-doctor-test-downloads, so later runs
are offline. Only the files the analysis needs are extracted: TE's attention module from its
pure-Python wheel, the top-level `flash_attn` package from its sdist (with PKG-INFO as the
METADATA), the dispatch package of XTuner, transformers' top-level, utils and modeling files (or the
whole package), and PEFT. A test that cannot download skips, saying why.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Iterable

import pytest

# (project, file) -> sha256 (from PyPI's simple index, checked on download)
ARTIFACTS = {
    ("transformer-engine", "transformer_engine-1.11.0-py3-none-any.whl"): "27ffde8fb9d885eb60b74618c857b6676fc16132b433ea7ab68637ad3e2d3668",
    ("flash-attn", "flash_attn-2.6.3.tar.gz"): "5bfae9500ad8e7d2937ebccb4906f3bc464d1bf66eedd0e4adabd520811c7b52",
    ("flash-attn", "flash_attn-2.5.8.tar.gz"): "2e5b2bcff6d5cff40d494af91ecd1eb3c5b4520a6ce7a0a8b1f9c1ed129fb402",
    ("flash-attn", "flash_attn-2.5.6.tar.gz"): "d25801aa060877cad997939bd7130faf620fdbeda947c3ffde5865906d430c36",
    ("transformer-engine", "transformer_engine-2.1.0-py3-none-any.whl"): "c3253024f7426d67d9defb14bd395cee6b07ed3d28a5fb959575118dc3b4366e",
    ("transformers", "transformers-4.44.0-py3-none-any.whl"): "ea0ff72def71e9f4812d9414d4803b22681b1617aa6f511bd51cfff2b44a6fca",
    ("transformers", "transformers-4.42.4-py3-none-any.whl"): "6d59061392d0f1da312af29c962df9017ff3c0108c681a56d1bc981004d16d24",
    ("xtuner", "xtuner-0.1.23-py3-none-any.whl"): "fb9398b1ecd3c371d5a8dc8efa19540abfa853fd9c1d585ec25a6bd30820c6d4",
    ("transformers", "transformers-4.48.0-py3-none-any.whl"): "6d3de6d71cb5f2a10f9775ccc17abce9620195caaf32ec96542bd2a6937f25b0",
    ("llamafactory", "llamafactory-0.8.3-py3-none-any.whl"): "0a8baa7e7d953f36d7697778d3031fdcbabacedcb2afa74f209a1c226c9f92d4",
    ("llamafactory", "llamafactory-0.9.2-py3-none-any.whl"): "f0b080c2cd353ffb400c804305876000d1265567cd20f48f476292582e209e4a",
    ("verl", "verl-0.6.0-py3-none-any.whl"): "2666528b8ab4494e2ac40c282a99281296c2d9dc9675ceac6bea8d41fb69b321",
    ("transformers", "transformers-4.56.1-py3-none-any.whl"): "1697af6addfb6ddbce9618b763f4b52d5a756f6da4899ffd1b4febf58b779248",
    ("unsloth", "unsloth-2024.8-py3-none-any.whl"): "da2ee4de96a10b7489723dc5d3c6a2ef383774f7cf249abe44919c615ae8df49",
    ("peft", "peft-0.17.1-py3-none-any.whl"): "3d129d64def3d74779c32a080d2567e5f7b674e77d546e3585138216d903f99e",
    ("transformers", "transformers-5.0.0rc2-py3-none-any.whl"): "f8f2a14060ab11f20a0eec39d827af54c1589c327c5799d82808ae3f4167418a",
    ("transformers", "transformers-5.0.0rc3-py3-none-any.whl"): "383fad27f4f73092d330e45fae384681e5c8521e1dc1cf6cb1a297780e68bf2d",
}
INDEX = "https://pypi.org/simple"


def downloads_dir() -> Path:
    d = os.environ.get("ATTN_DOCTOR_TEST_DOWNLOADS") or os.path.join(tempfile.gettempdir(), "attn-doctor-test-downloads")
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(filename: str) -> Path:
    """The artifact, from the download cache or PyPI; pytest.skip when it cannot be had."""
    project, sha = next((p, s) for (p, f), s in ARTIFACTS.items() if f == filename)
    target = downloads_dir() / filename
    if target.is_file() and _sha(target) == sha:
        return target
    try:
        page = urllib.request.urlopen(f"{INDEX}/{project}/", timeout=20).read().decode("utf-8", "replace")
        m = re.search(r'href="([^"#]*/' + re.escape(filename) + r')#sha256=([0-9a-f]+)"', page)
        if m is None:
            pytest.skip(f"{filename} is not on {INDEX}/{project}/")
        tmp = target.with_suffix(".part")
        with urllib.request.urlopen(m.group(1), timeout=120) as resp, open(tmp, "wb") as fh:
            shutil.copyfileobj(resp, fh)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        pytest.skip(f"offline: cannot download {filename} from PyPI ({exc}); set ATTN_DOCTOR_TEST_DOWNLOADS to a folder holding it")
    if _sha(tmp) != sha:
        tmp.unlink()
        pytest.fail(f"{filename}: sha256 differs from the pinned one")
    os.replace(tmp, target)
    return target


def install_wheel(site: Path, filename: str, patterns: Iterable[str], exclude: Iterable[str] = ()) -> None:
    """Extract the wheel's members matching `patterns` (and its METADATA) into `site`."""
    pats, excl = list(patterns), list(exclude)
    with zipfile.ZipFile(fetch(filename)) as zf:
        for name in zf.namelist():
            keep = name.endswith(".dist-info/METADATA") or any(fnmatch.fnmatchcase(name, p) for p in pats)
            if keep and not any(fnmatch.fnmatchcase(name, e) for e in excl):
                zf.extract(name, site)


def install_sdist_package(site: Path, filename: str, package: str, version: str = "") -> Path:
    """The sdist's top-level `package/*.py` into `site`, with its PKG-INFO as dist-info METADATA.

    `version` overrides the Version header (a local build such as `2.5.8+local`)."""
    stem = filename[: -len(".tar.gz")]
    dist, real_version = stem.rsplit("-", 1)
    version = version or real_version
    with tarfile.open(fetch(filename)) as tf:
        for member in tf.getmembers():
            parts = member.name.split("/")
            if len(parts) == 3 and parts[1] == package and parts[2].endswith(".py") and member.isfile():
                out = site / package / parts[2]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tf.extractfile(member).read())  # type: ignore[union-attr]
            elif len(parts) == 2 and parts[1] == "PKG-INFO":
                text = tf.extractfile(member).read().decode()  # type: ignore[union-attr]
                text = re.sub(r"(?m)^Version: .*$", f"Version: {version}", text, count=1)
                meta = site / f"{dist}-{version}.dist-info" / "METADATA"
                meta.parent.mkdir(parents=True, exist_ok=True)
                meta.write_text(text)
    return site / package


def install_te(site: Path, version: str = "1.11.0") -> None:
    install_wheel(site, f"transformer_engine-{version}-py3-none-any.whl", ["transformer_engine/pytorch/attention.py"])


def install_transformers(site: Path, version: str) -> None:
    install_wheel(
        site,
        f"transformers-{version}-py3-none-any.whl",
        ["transformers/*.py", "transformers/utils/*.py"],
        exclude=["*modeling_tf_*", "*modeling_flax_*", "transformers/models/*/convert_*", "transformers/commands/*",
                 "transformers/pipelines/*", "transformers/data/*", "transformers/onnx/*", "transformers/agents/*"],
    )


def install_transformers_whole(site: Path, version: str) -> None:
    """Every file of the package: a lazy top level is judged by what all of its files spell."""
    install_wheel(site, f"transformers-{version}-py3-none-any.whl", ["transformers/*"])


def install_peft(site: Path) -> None:
    install_wheel(site, "peft-0.17.1-py3-none-any.whl", ["peft/*"])


def install_xtuner(site: Path) -> None:
    install_wheel(site, "xtuner-0.1.23-py3-none-any.whl", ["xtuner/model/modules/dispatch/*"])


def install_llamafactory(site: Path) -> None:
    install_wheel(site, "llamafactory-0.8.3-py3-none-any.whl", ["llamafactory/model/*"])


def install_unsloth(site: Path) -> None:
    install_wheel(site, "unsloth-2024.8-py3-none-any.whl", ["unsloth/models/*"])


def install_verl(site: Path) -> None:
    install_wheel(site, "verl-0.6.0-py3-none-any.whl", ["verl/models/transformers/*"])
