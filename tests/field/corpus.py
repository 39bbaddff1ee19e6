"""The field corpus: real public failure reports (and the healthy configurations their threads
established) as scenarios under tests/field/cases/<family>/<id>.yaml.

Each scenario is checked the way a user would run the doctor: its snapshot and workload go to
temporary files and `attn-doctor check --no-kernels --format json` reads them. A failure is
*caught* when one of its expected rules fires at the expected severity or worse; its fix (when
the thread established one) must then re-check with no error. A near-miss must produce no
error at all. The format is described in tests/field/README.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

CASES = Path(__file__).resolve().parent / "cases"

KINDS = ("failure", "near-miss")
FAMILIES = (
    "xformers", "torch-cp", "ulysses", "framework-api", "model-regression", "flex", "wheels",
    "remote-code", "te", "flash-attn", "cudnn", "sdpa", "other",
)
FAILURE_KINDS = ("crash-at-import", "crash-first-step", "no-backend", "slowdown", "wrong-results", "hang")
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
REQUIRED = ("id", "kind", "family", "source", "gpu", "summary", "snapshot")
OPTIONAL = ("failure_kind", "workload", "expect", "fix", "known_gap")


class ScenarioError(ValueError):
    """A scenario file that does not follow the format (named with its path)."""


@dataclass
class Scenario:
    path: Path
    id: str
    kind: str
    family: str
    source: str
    gpu: str
    summary: str
    snapshot: Dict[str, Any]
    workload: Optional[Dict[str, Any]]
    failure_kind: Optional[str] = None
    rules: List[str] = field(default_factory=list)
    severity: str = "error"
    fix_pins: List[str] = field(default_factory=list)
    fix_env: Dict[str, str] = field(default_factory=dict)
    fix_workload: Optional[Dict[str, Any]] = None
    known_gap: Optional[str] = None

    @property
    def has_fix(self) -> bool:
        return bool(self.fix_pins or self.fix_env or self.fix_workload)


def _fail(path: Path, why: str) -> ScenarioError:
    return ScenarioError(f"{path}: {why}")


def load(path: Path) -> Scenario:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise _fail(path, f"not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail(path, "expected a mapping")
    unknown = sorted(set(doc) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise _fail(path, f"unknown keys {unknown}")
    missing = [k for k in REQUIRED if not doc.get(k)]
    if missing:
        raise _fail(path, f"missing {missing}")
    if doc["kind"] not in KINDS:
        raise _fail(path, f"kind must be one of {KINDS}")
    if doc["family"] not in FAMILIES:
        raise _fail(path, f"family must be one of {FAMILIES}")
    if not str(doc["source"]).startswith("https://github.com/"):
        raise _fail(path, "source must be a public GitHub issue/PR/discussion URL")
    expect = doc.get("expect") or {}
    fix = doc.get("fix") or {}
    sc = Scenario(
        path=path, id=str(doc["id"]), kind=doc["kind"], family=doc["family"],
        source=str(doc["source"]), gpu=str(doc["gpu"]), summary=str(doc["summary"]),
        snapshot=doc["snapshot"], workload=doc.get("workload"),
        failure_kind=doc.get("failure_kind"),
        rules=list(expect.get("rules") or []), severity=str(expect.get("severity", "error")),
        fix_pins=list(fix.get("pins") or []), fix_env={str(k): str(v) for k, v in (fix.get("env") or {}).items()},
        fix_workload=fix.get("workload"), known_gap=doc.get("known_gap"),
    )
    if sc.kind == "failure":
        if sc.failure_kind not in FAILURE_KINDS:
            raise _fail(path, f"failure_kind must be one of {FAILURE_KINDS}")
        if not sc.rules:
            raise _fail(path, "a failure needs expect.rules")
        if sc.severity not in SEVERITY_RANK:
            raise _fail(path, "expect.severity must be error, warning or info")
        if sc.severity != "error" and sc.failure_kind != "slowdown":
            raise _fail(path, "only a slowdown may expect less than an error")
    elif sc.rules or sc.has_fix:
        raise _fail(path, "a near-miss carries no expect.rules and no fix")
    return sc


def all_paths() -> List[Path]:
    return sorted(CASES.glob("*/*.yaml"))


def load_all() -> List[Scenario]:
    return [load(p) for p in all_paths()]


def _run(args: List[str]) -> Tuple[int, Dict[str, Any]]:
    from doctor.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["check", "--no-kernels", "--format", "json", *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    text = out.getvalue()
    if code not in (0, 1):
        raise RuntimeError(f"check exited {code}: {text[-500:]}")
    return code, json.loads(text)


def _merge(base: Optional[Dict[str, Any]], over: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if over is None:
        return base
    merged = dict(base or {})
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = {**merged[k], **v}
        else:
            merged[k] = v
    return merged


def fired(doc: Dict[str, Any], minimum: str = "info") -> Dict[str, str]:
    """rule id -> severity of every fired finding at `minimum` or worse."""
    rank = SEVERITY_RANK[minimum]
    return {
        f["rule_id"]: f["severity"]
        for f in doc["findings"]
        if f["status"] == "fired" and SEVERITY_RANK.get(f["severity"], 0) >= rank
    }


@dataclass
class Outcome:
    scenario: Scenario
    ok: bool
    detail: str
    fired: Dict[str, str]


def evaluate(sc: Scenario, tmp: Path) -> Outcome:
    """Run the doctor on one scenario; ok means caught (failure) or clean (near-miss), and for a
    failure with a fix, that the fix re-checks without error."""
    snap = tmp / f"{sc.id}.snapshot.json"
    snap.write_text(json.dumps(sc.snapshot))

    def check(workload: Optional[Dict[str, Any]], extra: List[str]) -> Dict[str, Any]:
        args = ["--env", str(snap)]
        if workload:
            wl = tmp / f"{sc.id}.workload.{len(extra)}.yaml"
            wl.write_text(yaml.safe_dump(workload))
            args += ["--workload", str(wl)]
        return _run(args + extra)[1]

    doc = check(sc.workload, [])
    got = fired(doc)
    errors = sorted(r for r, s in got.items() if s == "error")
    if sc.kind == "near-miss":
        if errors:
            return Outcome(sc, False, f"near-miss raised errors {errors}", got)
        return Outcome(sc, True, "clean", got)
    want = SEVERITY_RANK[sc.severity]
    hit = [r for r in sc.rules if r in got and SEVERITY_RANK[got[r]] >= want]
    if not hit:
        return Outcome(sc, False, f"not caught: expected {sc.rules} at {sc.severity}+, fired {sorted(got)}", got)
    if sc.has_fix:
        extra: List[str] = []
        for pin in sc.fix_pins:
            extra += ["--assume", pin]
        for k, v in sc.fix_env.items():
            extra += ["--assume-env", f"{k}={v}"]
        after = fired(check(_merge(sc.workload, sc.fix_workload), extra), "error")
        if after:
            return Outcome(sc, False, f"caught by {hit}, but the fix leaves errors {sorted(after)}", got)
    return Outcome(sc, True, f"caught by {hit}", got)


def isolated_env() -> Dict[str, str]:
    """Keep the doctor's caches out of the user's home while the corpus runs."""
    return {"XDG_CACHE_HOME": tempfile.mkdtemp(prefix="attn-doctor-field-")}
