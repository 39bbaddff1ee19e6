#!/usr/bin/env python3
"""Check the error texts rules quote against the released code of the packages they name (a
developer tool, not shipped).

A message that quotes an error ("the first step stops with \"AttributeError: ...\"") makes a
claim about every release the rule fires for, and the audits keep finding quotes that are right
for the release someone read and wrong for an older or newer one inside the range. For each
quote in a rule's message, this tool takes every package the rule's `when:` names with a
version (torch excepted: PyPI has no readable artifact of it), reads the first and the last
final release each of those version conditions matches (tools/evidence.py's cache and
downloader), and looks for the quote's literal parts in the release's source files. A part is
the quote cut at whatever a message fills in: placeholders, numbers, parenthesised and
single-quoted names, "...".

Output, one lead a line:
  RULE "quote...": not in PKG VERSION (found in PKG VERSION)  the text differs in that release
  RULE "quote...": in none of PKG ... (read VERSIONS)          from another package (torch,
                                                               CUDA), or paraphrased
A lead is for a reader with the sources at hand: a quote may come from a package the rule does
not name, or from a release outside the ones read here.

    PYTHONPATH=. python tools/quotes.py [RULE-ID ...] [--json out.json] [--cache DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _artifacts  # noqa: E402
import evidence as ev  # noqa: E402

from doctor.rules.loader import Catalogue, Rule, load_catalogue  # noqa: E402

# what a message fills into an upstream text: placeholders, numbers, names, elisions
FILLED = re.compile(r"\{[^{}]*\}|\.\.\.|…|\([^()]*\)|(?<!\w)'[^']*'(?!\w)|`[^`]*`|<[^<>]*>|\b\d+(?:\.\d+)*\b|\b[B-HJ-Z]\b")
# the exception's class, which Python prints before the text the code raises with
RAISED_AS = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Warning)|AssertionError)\s*:\s*")
# texts Python (or torch's C++) writes itself, found in no package's source
BUILTIN = (
    "got an unexpected keyword argument", "has no attribute", "positional argument", "No module named",
    "cannot import name", "values to unpack", "unsupported operand", "is not subscriptable", "is not callable",
    "Boolean value of Tensor", "undefined symbol", "path should be string", "object is not iterable", "required keyword-only argument",
)
SOURCE_SUFFIXES = (".py", ".pyi", ".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp")
SKIP_PACKAGES = {"torch"}  # no sdist and no pure wheel on PyPI
MIN_PART = 12


def quotes(message: str) -> List[str]:
    """The quoted texts of a message that read like an error (at least three words). Quotes pair
    up in order: the text between the 1st and 2nd double quote, the 3rd and 4th, and so on."""
    spans = message.split('"')[1::2]
    return [q for q in spans if 12 <= len(q) <= 400 and len(q.split()) >= 3]


def parts(quote: str) -> List[str]:
    """The quote's literal parts, whitespace collapsed; only parts long enough to be telling."""
    out = []
    for piece in FILLED.split(RAISED_AS.sub("", quote)):
        piece = " ".join(piece.split()).strip(" :,.;!?-")
        if any(b in piece for b in BUILTIN) or len(piece.split()) < 2:
            continue
        if len(piece) >= MIN_PART:
            out.append(piece)
    return out


def source_text(files: Any) -> str:
    """Every source file of an artifact as one string: whitespace collapsed, and adjacent string
    literals ("a " "b", also across lines) joined, so a message split over lines is found whole."""
    chunks = []
    for name in files.glob("*"):
        if name.endswith(SOURCE_SUFFIXES):
            text = files.text(name)
            text = re.sub(r"\"\s*\n\s*[rbfuRBFU]{0,2}\"", "", text)
            text = re.sub(r"'\s*\n\s*[rbfuRBFU]{0,2}'", "", text)
            text = re.sub(r"\"\s+[rbfuRBFU]{0,2}\"", "", text)
            chunks.append(" ".join(text.split()))
    return "\n".join(chunks)


def readable(text: Optional[str]) -> Optional[str]:
    """An artifact with no source file at all (TransformerEngine 1.9.0's meta wheel, which only
    depends on the real packages) says nothing about a quote: unread, not "not found"."""
    return text if text and text.strip() else None


def version_specs(cond: Any) -> Iterable[Tuple[str, str]]:
    if isinstance(cond, Mapping):
        if "package" in cond and isinstance(cond.get("version"), str):
            yield str(cond["package"]), str(cond["version"])
        for key in ("all", "any"):
            for child in cond.get(key, ()) or ():
                yield from version_specs(child)
        if "not" in cond:
            yield from version_specs(cond["not"])


def probes(versions: Sequence[str], specs: Sequence[str], floor: Optional[str] = None) -> List[str]:
    """The first and last release each version condition matches (oldest first). A condition
    open below starts at the catalogue's floor for the package, or is read at its top only."""
    picked: Set[str] = set()
    for spec in specs:
        hit = [v for v in versions if ev.version_matches(v, spec)]
        if not re.search(r"(>=|>|==|~=)", spec):
            hit = [v for v in hit if floor and ev._key(v) >= ev._key(floor)] or hit[-1:]
        if hit:
            picked.update((hit[0], hit[-1]))
    return [v for v in versions if v in picked]


class Reader:
    """Source text per (package, version), downloaded once into the evidence cache."""

    def __init__(self, cache: Path) -> None:
        self.run = ev.Run(cache)
        self.texts: Dict[Tuple[str, str], Optional[str]] = {}
        self.failures: List[str] = []

    def versions(self, package: str) -> List[str]:
        try:
            return [a.version for a in self.run.artifacts(package)]
        except Exception as exc:  # noqa: BLE001 - a package PyPI does not answer for is reported
            self.failures.append(f"{package}: {exc}")
            return []

    def forget(self, package: str, version: str) -> None:
        self.texts.pop((package, version), None)

    def text(self, package: str, version: str) -> Optional[str]:
        key = (package, version)
        if key not in self.texts:
            arts = [a for a in self.run.artifacts(package) if a.version == version]
            paths = self.run.fetch_all(package, arts)
            self.texts[key] = readable(source_text(ev.Files(paths[version]))) if version in paths else None
        return self.texts[key]


Quotes = List[Tuple[str, List[str]]]  # (quote, its literal parts)
Has = Callable[[str, str, List[str]], Optional[bool]]  # (package, version, parts) -> all there; None: unread


def plan(rule: Rule, reader: Any, floors: Mapping[str, str]) -> Tuple[Quotes, Dict[str, List[str]]]:
    """The rule's quotes, and the releases to read them in: package -> versions."""
    qs = [(q, parts(q)) for q in quotes(rule.message)]
    qs = [(q, p) for q, p in qs if p]
    if not qs:
        return [], {}
    specs: Dict[str, List[str]] = {}
    for pkg, spec in version_specs(rule.when):
        if pkg not in SKIP_PACKAGES:
            specs.setdefault(pkg, []).append(spec)
    return qs, {pkg: probes(reader.versions(pkg), sp, floors.get(pkg)) for pkg, sp in specs.items()}


def judge(rule: Rule, qs: Quotes, read: Mapping[str, List[str]], has: Has) -> List[Dict[str, Any]]:
    leads: List[Dict[str, Any]] = []
    for q, ps in qs:
        hits: Dict[str, List[str]] = {}
        misses: Dict[str, List[str]] = {}
        for pkg, versions in read.items():
            for v in versions:
                got = has(pkg, v, ps)
                if got is not None:
                    (hits if got else misses).setdefault(pkg, []).append(v)
        if not hits:
            if any(read.values()):
                leads.append({"rule": rule.id, "quote": q, "kind": "unowned", "read": {k: v for k, v in read.items() if v}})
            continue
        for pkg in hits:
            if misses.get(pkg):
                leads.append({"rule": rule.id, "quote": q, "kind": "varies", "package": pkg, "found": hits[pkg], "missing": misses[pkg]})
    return leads


def check_rule(rule: Rule, reader: Any, floors: Mapping[str, str]) -> List[Dict[str, Any]]:
    qs, read = plan(rule, reader, floors)

    def has(pkg: str, v: str, ps: List[str]) -> Optional[bool]:
        text = reader.text(pkg, v)
        return None if text is None else all(p in text for p in ps)

    return judge(rule, qs, read, has)


def scan(ids: Sequence[str], cache: Path, cat: Optional[Catalogue] = None, reader: Any = None) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Every rule's quotes; each release is read once and let go (a transformers release is
    tens of megabytes of source), holding only which of the wanted parts it contains."""
    cat = cat or load_catalogue(use_cache=False)
    reader = reader or Reader(cache)
    plans = [(rule, *plan(rule, reader, cat.floors)) for rule in cat.rules if not ids or rule.id in ids]
    wanted: Dict[Tuple[str, str], Set[str]] = {}
    for _, qs, read in plans:
        for pkg, versions in read.items():
            for v in versions:
                wanted.setdefault((pkg, v), set()).update(p for _, ps in qs for p in ps)
    found: Dict[Tuple[str, str], Optional[Set[str]]] = {}
    for key in sorted(wanted):
        text = reader.text(*key)
        found[key] = None if text is None else {p for p in wanted[key] if p in text}
        reader.forget(*key)

    def has(pkg: str, v: str, ps: List[str]) -> Optional[bool]:
        got = found.get((pkg, v))
        return None if got is None else all(p in got for p in ps)

    leads: List[Dict[str, Any]] = []
    for rule, qs, read in plans:
        leads.extend(judge(rule, qs, read, has))
    return leads, reader.failures + list(getattr(getattr(reader, "run", None), "failures", []))


def line(x: Mapping[str, Any]) -> str:
    q = x["quote"] if len(x["quote"]) <= 70 else x["quote"][:67] + "..."
    if x["kind"] == "varies":
        return f'{x["rule"]} "{q}": not in {x["package"]} {", ".join(x["missing"])} (found in {", ".join(x["found"])})'
    read = "; ".join(f"{k} {', '.join(v)}" for k, v in x["read"].items())
    return f'{x["rule"]} "{q}": in none of the releases read ({read})'


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rules", nargs="*", help="rule ids (default: every rule)")
    ap.add_argument("--json", type=Path, help="write the leads here")
    _artifacts.add_cache_option(ap)
    args = ap.parse_args(argv)
    leads, failures = scan(args.rules, args.cache)
    for f in failures:
        print(f"download failed: {f}", file=sys.stderr)
    varies = sum(1 for x in leads if x["kind"] == "varies")
    summary = f"{len(leads)} leads in {len({x['rule'] for x in leads})} rules ({varies} quotes missing from a release in range)"
    return _artifacts.write_leads(leads, [line(x) for x in leads], summary, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
