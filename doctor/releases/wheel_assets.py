"""Refresh the flash-attn wheel catalogue (rules/releases/flash-attn-wheels.json) from the
assets a GitHub release really carries, instead of the CI matrix at its tag.

The two differ: wheels are sometimes added to a release after its tag (v2.8.3 gained torch 2.9
wheels that the tag's publish.yml never listed), and a matrix entry whose build failed never
became an asset. What setup.py downloads is an asset name:

    flash_attn-{ver}+cu{CUDA}torch{major.minor}cxx11abi{TRUE|FALSE}-cp{py}-cp{py}-linux_x86_64.whl

so a release row is rebuilt from those names (Linux x86_64 only, like the rest of the catalogue):
one build per torch line with the CUDA tags, CPythons and C++ ABIs seen. The CUDA tag is kept in
the catalogue's toolkit spelling ("12" for cu12, "12.2" for cu122), which doctor/releases/wheels.py
maps back to the tag. `broken` entries and other releases are kept.

Sources: the GitHub releases API (`/repos/Dao-AILab/flash-attention/releases/tags/{tag}`), or a
saved copy of its answer (`--assets-json FILE`) where GitHub cannot be reached.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from doctor.errors import InputError
from doctor.releases.refresh import Fetcher, IndexUnreachable, _default_fetcher

REPO_API = "https://api.github.com/repos/Dao-AILab/flash-attention/releases/tags/{tag}"
_ASSET = re.compile(
    r"^flash_attn-(?P<version>[0-9][^+]*)\+cu(?P<cu>\d+)torch(?P<torch>\d+\.\d+)"
    r"cxx11abi(?P<abi>TRUE|FALSE)-cp(?P<py>\d+)-cp\d+-linux_x86_64\.whl$"
)


@dataclass(frozen=True)
class Asset:
    version: str
    cuda: str  # catalogue spelling: "12", "12.2", "11.8"
    torch: str  # "2.8"
    cxx11_abi: bool
    python: str  # "3.12"


def _cuda_from_tag(tag: str) -> str:
    if len(tag) <= 2:
        return tag  # cu12, cu13: the major only (flash-attn >= 2.7.0)
    return f"{tag[:-1]}.{tag[-1]}"  # cu118 -> 11.8, cu122 -> 12.2


def parse_asset(name: str) -> Optional[Asset]:
    """The wheel an asset name describes, or None for anything else (sdists, other platforms)."""
    m = _ASSET.match(name)
    if not m:
        return None
    py = m.group("py")
    return Asset(
        version=m.group("version"),
        cuda=_cuda_from_tag(m.group("cu")),
        torch=m.group("torch"),
        cxx11_abi=m.group("abi") == "TRUE",
        python=f"{py[0]}.{py[1:]}",
    )


def _key(text: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def builds_from_assets(version: str, names: Iterable[str]) -> List[Dict[str, Any]]:
    """One catalogue build per torch line, from the asset names of release `version`."""
    by_torch: Dict[str, Dict[str, set]] = {}
    for name in names:
        a = parse_asset(name)
        if a is None or a.version != version:
            continue
        row = by_torch.setdefault(a.torch, {"cuda": set(), "python": set(), "abi": set()})
        row["cuda"].add(a.cuda)
        row["python"].add(a.python)
        row["abi"].add(a.cxx11_abi)
    return [
        {
            "torch": torch,
            "torch_build": torch,  # the asset name gives the torch line only
            "cuda": sorted(row["cuda"], key=_key),
            "python": sorted(row["python"], key=_key),
            "cxx11_abi": sorted(row["abi"]),
        }
        for torch, row in sorted(by_torch.items(), key=lambda kv: _key(kv[0]))
    ]


def _asset_names(doc: Any) -> List[str]:
    """Asset names from a GitHub release object, a list of them, or a plain list of names."""
    if isinstance(doc, Mapping):
        return [str(a.get("name", "")) for a in doc.get("assets") or [] if isinstance(a, Mapping)]
    if isinstance(doc, list):
        names: List[str] = []
        for item in doc:
            names.extend([item] if isinstance(item, str) else _asset_names(item))
        return names
    return []


def fetch_release_assets(version: str, fetch: Fetcher = _default_fetcher) -> List[str]:
    """The asset names of GitHub release v{version}; IndexUnreachable when GitHub cannot be asked."""
    url = REPO_API.format(tag=f"v{version}")
    try:
        doc = fetch(url)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise IndexUnreachable(
            f"could not read the assets of flash-attn v{version} from GitHub ({url}): {exc}",
            hint="save the API answer elsewhere and pass it with --assets-json FILE",
        ) from None
    return _asset_names(doc)


@dataclass(frozen=True)
class WheelRefresh:
    written: Optional[Path]
    updated: Tuple[Tuple[str, int], ...]  # (version, number of torch lines with wheels)


def refresh_wheels(
    directory: Path,
    versions: Sequence[str],
    *,
    output: Optional[Path] = None,
    assets: Optional[Mapping[str, Sequence[str]]] = None,
    fetch: Fetcher = _default_fetcher,
    today: Optional[str] = None,
    dry_run: bool = False,
) -> WheelRefresh:
    """Rebuild the rows of `versions` in flash-attn-wheels.json from release assets (given in
    `assets`, else fetched), keep every other row and the `broken` list, write atomically."""
    path = directory / "flash-attn-wheels.json"
    doc: Dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    rows = {str(r["version"]): dict(r) for r in doc.get("releases", [])}
    updated: List[Tuple[str, int]] = []
    for version in versions:
        names = list(assets[version]) if assets is not None and version in assets else fetch_release_assets(version, fetch)
        builds = builds_from_assets(version, names)
        if not builds:
            raise InputError(
                f"flash-attn v{version}: no Linux x86_64 wheel among {len(names)} release assets",
                hint="check the version (the release tag is v<version>) or the assets file",
            )
        rows[version] = {"version": version, "tag": f"v{version}", "from": "release assets", "builds": builds}
        updated.append((version, len(builds)))
    doc["releases"] = [rows[v] for v in sorted(rows, key=_key)]
    doc["retrieved"] = today or _dt.date.today().isoformat()
    doc["assets_source"] = REPO_API.format(tag="v{version}") + " (rows marked \"from\": \"release assets\")"
    written = None
    if not dry_run:
        out = (output or directory) / "flash-attn-wheels.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(out)
        written = out
        from doctor.releases.catalogue import _catalogue, _load

        _load.cache_clear()  # a catalogue read before this write is stale now
        _catalogue.cache_clear()
    return WheelRefresh(written=written, updated=tuple(updated))


def load_assets_file(path: Path) -> Dict[str, List[str]]:
    """version -> asset names, from a saved GitHub API answer (one release, or a list of them)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read assets file: {exc}", path=str(path), hint="save the answer of " + REPO_API) from None
    releases = doc if isinstance(doc, list) else [doc]
    out: Dict[str, List[str]] = {}
    for rel in releases:
        if not isinstance(rel, Mapping) or "tag_name" not in rel:
            raise InputError("expected a GitHub release object with tag_name and assets", path=str(path), hint="save the answer of " + REPO_API)
        out[str(rel["tag_name"]).lstrip("v")] = _asset_names(rel)
    return out
