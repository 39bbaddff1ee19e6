"""The cross-rank comparison table: rules/cluster/hetero.yaml, validated on load.

    load_table(path=None) -> Table   the shipped file unless a path is given; cached

Each compared fact names how to read it from one snapshot document (a dotted path, a list of
distributions, or one of the few readers below that need more than a lookup), what breaks when
ranks differ, the fix and its cost, and its sources. Unknown keys, a missing field, an unknown
reader or source name are errors naming `file:line` (exit 2), like the rules. Pure apart from
reading the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.errors import RuleError

NOT_INSTALLED = "not installed"
Reader = Callable[[Mapping[str, Any]], Optional[str]]


def path_of(doc: Mapping[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _unknown(doc: Mapping[str, Any], *keys: str) -> bool:
    unknown = doc.get("unknown")
    return isinstance(unknown, Mapping) and any(k in unknown for k in keys)


def _plain(dotted: str) -> Reader:
    def get(doc: Mapping[str, Any]) -> Optional[str]:
        if _unknown(doc, dotted):
            return None
        value = path_of(doc, dotted)
        return None if value is None else str(value)

    return get


def _torch_version(doc: Mapping[str, Any]) -> Optional[str]:
    value = path_of(doc, "torch.version")
    if value is None and isinstance(doc.get("packages"), Mapping):
        value = doc["packages"].get("torch", NOT_INSTALLED)
    return None if value is None else str(value)


def _torch_cuda(doc: Mapping[str, Any]) -> Optional[str]:
    if _unknown(doc, "torch.cuda") or path_of(doc, "torch.version") is None:
        return None
    value = path_of(doc, "torch.cuda")
    return "none (CPU or ROCm build)" if value is None else str(value)


def _cudnn(doc: Mapping[str, Any]) -> Optional[str]:
    for key in ("cudnn.loaded", "torch.cudnn_version", "cudnn.version"):
        value = path_of(doc, key)
        if value is not None and not _unknown(doc, key):
            return str(value)
    return None


def _dists(names: Sequence[str]) -> Reader:
    def get(doc: Mapping[str, Any]) -> Optional[str]:
        packages = doc.get("packages")
        if not isinstance(packages, Mapping):
            return None
        found = [f"{n} {packages[n]}" for n in names if n in packages]
        return ", ".join(found) if found else NOT_INSTALLED

    return get


def _gpus(doc: Mapping[str, Any]) -> Optional[str]:
    gpus = doc.get("gpus")
    if not isinstance(gpus, list):
        return None
    if not gpus:
        return "no GPU"
    counts: Dict[str, int] = {}
    for g in gpus:
        if not isinstance(g, Mapping):
            continue
        cc = str(g.get("compute_capability") or "?")
        label = f"{g.get('name', 'unknown GPU')} (sm{cc.replace('.', '')})"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n}x {label}" for label, n in sorted(counts.items()))


READERS: Dict[str, Reader] = {"torch_version": _torch_version, "torch_cuda": _torch_cuda, "cudnn": _cudnn, "gpus": _gpus}


def _by_major_version(values: Sequence[str]) -> str:
    majors = {v.split(".", 1)[0] for v in values}
    return "error" if len(majors) > 1 else "warning"


@dataclass(frozen=True)
class FactSpec:
    """One compared fact: how to read it and what it means when ranks disagree."""

    rule_id: str
    what: str  # "NVIDIA driver"
    get: Reader
    why: str  # what breaks when ranks differ
    fix: str  # what to do; {majority} and {odd} are filled in
    sources: Tuple[str, ...]
    severity: str = "error"
    severity_of: Optional[Callable[[Sequence[str]], str]] = None  # from the differing values
    pin: Optional[str] = None  # distribution to pin to the majority version
    pin_value: bool = False  # the value itself is "dist version": pin it
    cost: str = "rebuild or redeploy the image on the odd nodes"
    dists: Tuple[str, ...] = ()  # the distributions this fact covers


@dataclass(frozen=True)
class EnvFamily:
    prefix: str
    rule_id: str
    why: str
    sources: Tuple[str, ...]


@dataclass(frozen=True)
class Table:
    sources: Mapping[str, str]
    facts: Tuple[FactSpec, ...]
    attention_imports: Tuple[str, ...]
    env_families: Tuple[EnvFamily, ...]
    per_rank_env: frozenset

    @property
    def covered_dists(self) -> frozenset:
        """Distributions a fact row compares (the per-package finding leaves them out)."""
        return frozenset(d for f in self.facts for d in (*f.dists, *([f.pin] if f.pin else ())))


_TEXT = {"type": "string", "minLength": 1}
_NAMES = {"type": "array", "items": _TEXT, "minItems": 1}
SCHEMA: Dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sources", "facts", "attention_imports", "env_families", "per_rank_env"],
    "properties": {
        "sources": {"type": "object", "additionalProperties": {"type": "string", "pattern": "^https://"}},
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "what", "read", "why", "fix", "sources"],
                "properties": {
                    "id": {"type": "string", "pattern": "^CLUSTER-HETERO-[A-Z0-9-]+$"},
                    "what": _TEXT,
                    "read": {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 1,
                        "additionalProperties": False,
                        "properties": {"path": _TEXT, "packages": _NAMES, "reader": {"enum": sorted(READERS)}},
                    },
                    "why": _TEXT,
                    "fix": _TEXT,
                    "sources": _NAMES,
                    "severity": {"enum": ["error", "warning", "by_major_version"]},
                    "pin": _TEXT,
                    "pin_value": {"type": "boolean"},
                    "cost": _TEXT,
                },
            },
        },
        "attention_imports": _NAMES,
        "env_families": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["prefix", "id", "why", "sources"],
                "properties": {"prefix": {"type": "string"}, "id": {"type": "string", "pattern": "^CLUSTER-HETERO-[A-Z0-9-]+$"}, "why": _TEXT, "sources": _NAMES},
            },
        },
        "per_rank_env": _NAMES,
    },
}


def default_path() -> Path:
    from doctor.resources import rules_dir

    return rules_dir() / "cluster" / "hetero.yaml"


def _fail(path: Path, doc: Any, where: Sequence[Any], message: str, hint: Optional[str] = None) -> RuleError:
    from doctor.yamlio import line_of

    return RuleError(message, path=str(path), line=line_of(doc, list(where)) or None, hint=hint)


@lru_cache(maxsize=4)
def load_table(path: Optional[Path] = None) -> Table:
    import jsonschema

    from doctor.yamlio import read_yaml

    path = path or default_path()
    doc = read_yaml(path, what="cluster comparison table", error=RuleError)
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = list(e.absolute_path)
        if e.validator == "additionalProperties":
            import re

            where += re.findall(r"'([^']+)' was unexpected", e.message)[:1]  # the offending key's own line
        raise _fail(path, doc, where, f"{'.'.join(str(p) for p in e.absolute_path) or 'file'}: {e.message}", hint="see the comment at the top of the file")
    sources: Mapping[str, str] = dict(doc["sources"])

    def urls(names: List[str], where: List[Any]) -> Tuple[str, ...]:
        for i, n in enumerate(names):
            if n not in sources:
                raise _fail(path, doc, where + [i], f"unknown source {n!r}", hint="known: " + ", ".join(sorted(sources)))
        return tuple(sources[n] for n in names)

    facts: List[FactSpec] = []
    seen: Dict[str, int] = {}
    for i, row in enumerate(doc["facts"]):
        if row["id"] in seen:
            raise _fail(path, doc, ["facts", i, "id"], f"fact {row['id']}: duplicate id (also fact {seen[row['id']] + 1})")
        seen[row["id"]] = i
        read = row["read"]
        dists: Tuple[str, ...] = tuple(read.get("packages", ()))
        get = _plain(read["path"]) if "path" in read else _dists(dists) if dists else READERS[read["reader"]]
        severity = row.get("severity", "error")
        facts.append(
            FactSpec(
                rule_id=row["id"],
                what=row["what"],
                get=get,
                why=row["why"],
                fix=row["fix"],
                sources=urls(row["sources"], ["facts", i, "sources"]),
                severity="error" if severity == "by_major_version" else severity,
                severity_of=_by_major_version if severity == "by_major_version" else None,
                pin=row.get("pin"),
                pin_value=bool(row.get("pin_value", False)),
                cost=row.get("cost", FactSpec.cost),
                dists=dists,
            )
        )
    families = tuple(
        EnvFamily(f["prefix"], f["id"], f["why"], urls(f["sources"], ["env_families", i, "sources"])) for i, f in enumerate(doc["env_families"])
    )
    if not any(f.prefix == "" for f in families):
        raise _fail(path, doc, ["env_families"], "no catch-all environment family", hint='add one with prefix: ""')
    return Table(sources, tuple(facts), tuple(doc["attention_imports"]), families, frozenset(doc["per_rank_env"]))
