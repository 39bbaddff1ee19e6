"""The per-release scan that tools/signatures.py and tools/hf_attention_facts.py share (developer
tooling, not shipped): every final release of a package on PyPI that matches a specifier is
downloaded once into tools/evidence.py's artifact cache (sha256 checked), one reader turns each
artifact's files into a fact dict, and a release whose facts equal an earlier release's says
`same_as: VERSION` instead of repeating them. The result is written as JSON with one release a
line, so a regenerated file diffs line by line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evidence as ev  # noqa: E402

Reader = Callable[[str, Any], Dict[str, Any]]  # (version, the artifact's files) -> facts


def write_leads(leads: List[Dict[str, Any]], lines: List[str], summary: str, out: Any = None) -> int:
    """The end of a lead-finding tool (tools/quotes.py, tools/neighbours.py): one line per lead,
    a count, and the leads as JSON where `--json` names a file."""
    for text in lines:
        print(text)
    print(summary)
    if out:
        Path(out).write_text(json.dumps(leads, indent=1) + "\n", encoding="utf-8")
    return 0


def add_cache_option(ap: argparse.ArgumentParser) -> None:
    """--cache, defaulting to $ATTN_DOCTOR_EVIDENCE_CACHE or ~/.cache/attn-doctor-evidence (the
    cache tools/evidence.py fills)."""
    default = os.environ.get("ATTN_DOCTOR_EVIDENCE_CACHE", str(Path.home() / ".cache" / "attn-doctor-evidence"))
    ap.add_argument("--cache", type=Path, default=Path(default), help="download cache (default %(default)s)")


def scan(package: str, spec: str, cache: Path, read: Reader) -> Tuple[List[Tuple[Any, Dict[str, Any]]], List[str]]:
    """(artifact, read(version, its files)) for every final release matching `spec`, oldest first, and the
    download failures (a release that failed to download is left out)."""
    run = ev.Run(cache)
    arts = [a for a in run.artifacts(package) if ev.version_matches(a.version, spec)]
    paths = run.fetch_all(package, arts)
    rows = [(a, read(a.version, ev.Files(paths[a.version]))) for a in arts if a.version in paths]
    return rows, list(run.failures)


def by_release(rows: List[Tuple[Any, Dict[str, Any]]], key: str) -> Dict[str, Any]:
    """{version: {artifact, sha256, KEY: facts}}, or `same_as: VERSION` in place of KEY where an
    earlier release had the same facts."""
    releases: Dict[str, Any] = {}
    for a, facts in rows:
        same = next((v for v, info in releases.items() if info.get(key) == facts), None)
        entry = {"same_as": same} if same is not None else {key: facts}
        releases[a.version] = {"artifact": a.filename, "sha256": a.sha256, **entry}
    return releases


def write_json(out: Path, head: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]) -> None:
    """`head`'s keys as they are, then each section as an object with one entry a line."""
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    for s, (name, entries) in enumerate(sections.items()):
        lines.append(f" {json.dumps(name)}: {{")
        items = list(entries.items())
        for i, (k, v) in enumerate(items):
            lines.append(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" + ("," if i < len(items) - 1 else ""))
        lines.append(" }" + ("," if s < len(sections) - 1 else ""))
    lines.append("}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def report(out: Path, releases: Mapping[str, Any], failures: List[str]) -> int:
    """Print the failures and a summary to stderr; the exit status (2 when a download failed)."""
    for f in failures:
        print(f"download: {f}", file=sys.stderr)
    print(f"wrote {out} ({len(releases)} releases)", file=sys.stderr)
    return 2 if failures else 0
