"""Load and validate the YAML catalogue: frameworks with their backends, and rules.

Every problem is a RuleError naming `file:line`, the rule id and a hint. A validated
catalogue is cached as JSON (keyed by the files' paths, sizes and mtimes) so that the
static `check` does not pay for YAML parsing and schema validation on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from doctor.errors import InputError, RuleError
from doctor.memo import Memo
from doctor.model import Fix, Pin, Severity
from doctor.versions import canonical_name, parse_pin
from doctor.yamlio import LineDict, load_yaml

CACHE_FORMAT = 15


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Compose:
    """One release range's way of joining a family's members (rules/schema.py COMPOSE)."""

    any_of: Tuple[str, ...]
    requires: Tuple[str, ...] = ()
    when: Optional[Mapping[str, Any]] = None
    note: Optional[str] = None


@dataclass(frozen=True)
class Backend:
    id: str
    name: str
    framework: str
    installed: Optional[Mapping[str, Any]] = None
    cost: Optional[str] = None
    members: Tuple["Backend", ...] = ()  # a family's sub-backends (TE: FA2, FA3, FA4 in te.flash)
    compose: Tuple[Compose, ...] = ()


@dataclass(frozen=True)
class Selection:
    order: Tuple[str, ...]
    when: Optional[Mapping[str, Any]] = None
    note: Optional[str] = None


@dataclass(frozen=True)
class Coverage:
    """The oldest release of a package whose behaviour the catalogue checks (`covers:`)."""

    package: str
    since: str
    why: str

    @property
    def below(self) -> Mapping[str, Any]:
        """The condition "installed release older than `since`" (the same object every time)."""
        return _below(self.package, self.since)


@lru_cache(maxsize=None)
def _below(package: str, since: str) -> Mapping[str, Any]:
    return {"package": package, "version": f"<{since}"}


@dataclass(frozen=True)
class Framework:
    id: str
    name: str
    installed: Mapping[str, Any]
    backends: Tuple[Backend, ...]
    selection: Tuple[Selection, ...]
    sources: Tuple[str, ...]
    path: str
    line: int
    covers: Optional[Coverage] = None
    # stops the run before the framework picks a backend (an import error, a constructor assert):
    # where it holds, no finding about the framework's choice is reached (`reached_unless:`)
    reached_unless: Optional[Mapping[str, Any]] = None
    # stops the run before the framework's backend filters run, as a condition on facts (no
    # findings): where it holds, its backend rules (`disables:` one of its backends) stay silent,
    # since no backend is weighed at all (`filters_reached_unless:`)
    filters_reached_unless: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    message: str
    when: Mapping[str, Any]
    sources: Tuple[str, ...]
    tests: Mapping[str, Any]
    path: str
    line: int
    severity: Optional[Severity] = None  # findings
    disables: Optional[str] = None  # backend rules: the backend id this rule switches off
    absent: bool = False  # backend rules: the backend does not exist here; its other filters stay silent
    area: str = "general"
    fixes: Tuple[Fix, ...] = ()
    kernels: Tuple[str, ...] = ()
    silent_wrong_results: bool = False
    evidence: Tuple[Mapping[str, Any], ...] = ()  # assertions on released artifacts (tools/evidence.py)
    confidence: Optional[str] = None  # "inferred": the range is not derived from released artifacts
    confidence_note: Optional[str] = None
    alongside: Tuple[Tuple[str, str], ...] = ()  # (rule id, why both fire on the same inputs)
    stage: Optional[str] = None  # findings: where in the run the failure shows (doctor.model.STAGES)
    # the framework whose `reached_unless:` the loader and-ed to `when` (this finding reads its choice)
    reached_by: Optional[str] = None
    # a backend rule's `when:` as written, where the loader and-ed its framework's
    # `filters_reached_unless:` to it (version standings and `rules show` read this one)
    when_written: Optional[Mapping[str, Any]] = None

    @property
    def kind(self) -> str:
        return "backend" if self.disables else "finding"

    @cached_property
    def reads(self) -> Tuple[str, ...]:
        """The rule ids this rule's `when` reads through `finding:` leaves (computed once: the
        evaluator asks for every rule on every diagnosis)."""
        return tuple(finding_refs(self.when))


@dataclass(frozen=True)
class Catalogue:
    frameworks: Tuple[Framework, ...]
    rules: Tuple[Rule, ...]

    @property
    def backends(self) -> Dict[str, Backend]:
        return {b.id: b for fw in self.frameworks for b in fw.backends}

    @property
    def floors(self) -> Dict[str, str]:
        """Package -> the oldest release the catalogue checks (the frameworks' `covers:`;
        _check_catalogue refuses two different floors for one package)."""
        return {fw.covers.package: fw.covers.since for fw in self.frameworks if fw.covers}

    @cached_property
    def evaluation_order(self) -> Tuple[Rule, ...]:
        """The rules in catalogue order, except that a finding comes after every finding its
        `when` reads (the loader has refused cycles). Computed once per catalogue."""
        by_id = {r.id: r for r in self.rules}
        done: Set[str] = set()
        out: List[Rule] = []

        def visit(r: Rule) -> None:
            if r.id in done:
                return
            done.add(r.id)
            for dep in r.reads:
                if dep in by_id:
                    visit(by_id[dep])
            out.append(r)

        for r in self.rules:
            visit(r)
        return tuple(out)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)


def _line_of(doc: Any, path: Sequence[Any]) -> Tuple[int, Optional[str]]:
    """Deepest known line on the path into `doc`, and the id of the enclosing rule."""
    line, rule_id, node = getattr(doc, "line", 0), None, doc
    for step in path:
        if isinstance(node, dict):
            if isinstance(node.get("id"), str):
                rule_id = node["id"]
            line = getattr(node, "key_lines", {}).get(str(step), line)
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        else:
            break
        if hasattr(node, "line"):
            line = node.line
    if isinstance(node, dict) and isinstance(node.get("id"), str):
        rule_id = node["id"]
    return line, rule_id


# --------------------------------------------------------------------------- validation


def _schema_errors(doc: Any) -> List[Tuple[Sequence[Any], str]]:
    import jsonschema

    from doctor.rules.schema import RULE_FILE

    validator = jsonschema.Draft202012Validator(RULE_FILE)
    out: List[Tuple[Sequence[Any], str]] = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: len(list(e.absolute_path))):
        best = err
        if err.context:  # oneOf: report the branch that got furthest
            best = max(err.context, key=lambda e: len(list(e.absolute_path)))
        where = list(best.absolute_path)
        if best.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)' was unexpected", best.message)
            where += extra[:1]  # point at the offending key's own line
        out.append((where, _explain(best)))
    return out


def _explain(err: Any) -> str:
    if err.validator == "additionalProperties":
        extra = re.findall(r"'([^']+)' was unexpected", err.message)
        return f"unknown key {', '.join(repr(e) for e in extra) or err.message}"
    if err.validator == "required":
        return err.message.replace("is a required property", "is required")
    return err.message


def _fail(path: Path, doc: Any, where: Sequence[Any], msg: str, hint: Optional[str] = None) -> RuleError:
    line, rule_id = _line_of(doc, where)
    prefix = f"rule {rule_id}: " if rule_id else ""
    return RuleError(prefix + msg, path=str(path), line=line or None, hint=hint)


def _check_semantics(path: Path, doc: Mapping[str, Any], named_only: bool = False) -> None:
    """Facts, versions, regular expressions, evidence, placeholders, fixes and cases of one file;
    with `named_only`, only its named conditions (checked in their own file, before any rule
    elsewhere reads them, so an error names the file and line that define it)."""
    from doctor.rules.conditions import is_known_fact_path
    from doctor.versions import canonical_name as normalize_dist, validate_spec

    def walk(cond: Any, where: List[Any], finding: bool = False) -> None:
        if not isinstance(cond, dict):
            return
        for key in ("all", "any"):
            for i, child in enumerate(cond.get(key, ()) or ()):
                walk(child, where + [key, i], finding)
        if "not" in cond:
            walk(cond["not"], where + ["not"], False)
        if finding and "backend" in cond and cond.get("available") is True:
            # What happens inside a backend matters only where that backend runs: a finding
            # keyed on "available" fires when another backend is selected (the review's W2/W4).
            raise _fail(
                path, doc, where, f"a finding keyed on backend {cond['backend']!r} being available",
                hint="use `selected: true` (the backend that runs), or `has_backend`/`available: false` for availability",
            )
        if "fact" in cond and not is_known_fact_path(cond["fact"]):
            raise _fail(path, doc, where, f"unknown fact {cond['fact']!r}", hint="see docs/rules.md for fact names")
        spec = cond.get("version")
        if isinstance(spec, str):
            bad = validate_spec(spec)
            if bad:
                raise _fail(path, doc, where, f"bad version specifier {spec!r}", hint="use PEP 440, e.g. '>=2.6,<2.7'")
        if "matches" in cond:
            try:
                re.compile(cond["matches"])
            except re.error as exc:
                raise _fail(path, doc, where, f"bad regular expression: {exc}") from None

    def check_evidence(rule: Mapping[str, Any], i: int) -> None:
        leaves = {(normalize_dist(p), v) for p, v in _version_leaves(rule.get("when"))}
        for j, ev in enumerate(rule.get("evidence", ()) or ()):
            where = ["rules", i, "evidence", j]
            for key in ("range", "scan"):
                if key in ev and validate_spec(ev[key]):
                    raise _fail(path, doc, where, f"bad version specifier {ev[key]!r} in evidence", hint="use PEP 440, e.g. '>=2.6,<2.7'")
            if not ev.get("within") and (normalize_dist(ev["package"]), ev["range"]) not in leaves:
                raise _fail(
                    path, doc, where,
                    f"evidence range {ev['package']} {ev['range']!r} is not a version condition of this rule",
                    hint="use the exact specifier from `when`, or `within: true` for a fact that must hold on every release in the range",
                )
            for a in ev["all"]:
                for key in ("regex", "absent"):
                    if key in a:
                        try:
                            re.compile(a[key])
                        except re.error as exc:
                            raise _fail(path, doc, where, f"bad regular expression in evidence: {exc}") from None
                if "method" in a and "class" not in a:
                    raise _fail(path, doc, where, "evidence `method` needs `class`")

    for i, named in enumerate(doc.get("conditions", ()) or ()):
        walk(named.get("when"), ["conditions", i, "when"])
    if named_only:
        return
    placeholder = re.compile(r"\{([a-z_]+):([^{}]+)\}|\{([A-Za-z0-9_.\-]+)\}")
    unclosed = re.compile(r"\{[A-Za-z_][A-Za-z0-9_.\-]*(?::[^{}\s]*)?(?=[^A-Za-z0-9_.\-:}|,]|$)")
    for i, rule in enumerate(doc.get("rules", ()) or ()):
        walk(rule.get("when"), ["rules", i, "when"], finding=not rule.get("disables"))
        check_evidence(rule, i)
        if rule.get("silent_wrong_results") and rule.get("severity") != "error":
            raise _fail(path, doc, ["rules", i, "severity"], "a rule about silent wrong results must be an error")
        if rule.get("silent_wrong_results") and rule.get("stage") not in (None, "numbers"):
            raise _fail(path, doc, ["rules", i, "stage"], "a rule about silent wrong results shows at stage `numbers`")
        texts = [rule.get("title", ""), rule.get("message", "")]
        texts += [str(f.get(k, "")) for f in rule.get("fixes", ()) or () for k in ("description", "cost")]
        texts += [str(c) for f in rule.get("fixes", ()) or () for c in f.get("config", ()) or ()]
        for text in texts:
            broken = unclosed.search(str(text))
            if broken:
                raise _fail(path, doc, ["rules", i], f"unclosed placeholder {broken.group(0)!r}", hint="close it with `}`, e.g. {package.torch}")
            for m in placeholder.finditer(str(text)):
                func, path_ = m.group(1), m.group(3)
                if func is not None and func not in ("reasons", "selected", "first"):
                    raise _fail(path, doc, ["rules", i], f"unknown placeholder function {{{func}:...}}", hint="use {reasons:FRAMEWORK}, {reasons:BACKEND}, {selected:FRAMEWORK} or {first:FACT|FACT}")
                if func == "first":
                    for alt in m.group(2).split("|"):
                        if not is_known_fact_path(alt.strip()):
                            raise _fail(path, doc, ["rules", i], f"unknown fact {alt.strip()!r} in {{first:...}}", hint="see docs/rules.md for fact names")
                if path_ is not None and not is_known_fact_path(path_):
                    raise _fail(path, doc, ["rules", i], f"unknown fact in placeholder {{{path_}}}", hint="see docs/rules.md for fact names")
        fixes = rule.get("fixes", ()) or ()
        for kind in ("fires", "passes"):
            for k, case in enumerate((rule.get("tests") or {}).get(kind, ()) or ()):
                offers = case.get("offers") if isinstance(case, dict) else None
                if offers is None:
                    continue
                if kind == "passes":
                    raise _fail(path, doc, ["rules", i, "tests", kind, k, "offers"], "`offers` in a passes case",
                                hint="a rule that passes offers no fix: name the offered fixes in a fires case")
                bad = [n for n in offers if n >= len(fixes)]
                if bad:
                    raise _fail(path, doc, ["rules", i, "tests", kind, k, "offers"], f"fix index {bad[0]} but the rule has {len(fixes)} fix(es)",
                                hint="offers lists 0-based positions in the rule's fixes")
        for j, fix in enumerate(fixes):
            walk(fix.get("when"), ["rules", i, "fixes", j, "when"])
            for pin in fix.get("pins", ()) or ():
                try:
                    parse_pin(str(pin), what="pin")
                except InputError:
                    raise _fail(
                        path, doc, ["rules", i, "fixes", j], f"pin {pin!r} is not NAME==VERSION", hint="a fix pins one exact release"
                    ) from None
            if fix.get("workload"):
                from doctor.workload import build

                # a value that is one whole placeholder ("{workload.num_heads}") is filled in when
                # the rule fires (doctor.rules.evaluate.render_workload); the rest is checked here
                literal = {k: v for k, v in fix["workload"].items() if not (isinstance(v, str) and WHOLE_PLACEHOLDER.match(v))}
                for k, v in fix["workload"].items():
                    if k not in literal and not v.startswith("{workload."):
                        raise _fail(path, doc, ["rules", i, "fixes", j, "workload", k], f"placeholder {v!r} reads no workload key",
                                    hint="a fix's workload value may copy another workload key: {workload.KEY}")
                try:
                    build(literal, source="fix")
                except InputError as exc:
                    raise _fail(path, doc, ["rules", i, "fixes", j, "workload"], exc.message, hint="workload keys as in docs/workload.md") from None
    for i, fw in enumerate(doc.get("frameworks", ()) or ()):
        walk(fw.get("installed"), ["frameworks", i, "installed"])
        for j, b in enumerate(fw.get("backends", ())):
            if b.get("installed"):
                walk(b["installed"], ["frameworks", i, "backends", j, "installed"])
            for k, m in enumerate(b.get("members", ()) or ()):
                walk(m.get("installed"), ["frameworks", i, "backends", j, "members", k, "installed"])
            for k, c in enumerate(b.get("compose", ()) or ()):
                if c.get("when"):
                    walk(c["when"], ["frameworks", i, "backends", j, "compose", k, "when"])


def _build(path: Path, doc: Mapping[str, Any]) -> Tuple[List[Framework], List[Rule]]:
    frameworks = []
    for fw in doc.get("frameworks", ()) or ():
        frameworks.append(
            Framework(
                id=fw["id"],
                name=fw["name"],
                installed=_plain(fw["installed"]),
                backends=tuple(
                    Backend(
                        id=b["id"],
                        name=b["name"],
                        framework=fw["id"],
                        installed=_plain(b.get("installed")),
                        cost=b.get("cost"),
                        members=tuple(
                            Backend(id=m["id"], name=m["name"], framework=fw["id"], installed=_plain(m["installed"]))
                            for m in b.get("members", ()) or ()
                        ),
                        compose=tuple(
                            Compose(
                                any_of=tuple(c["any_of"]),
                                requires=tuple(c.get("requires", ())),
                                when=_plain(c.get("when")),
                                note=c.get("note"),
                            )
                            for c in b.get("compose", ()) or ()
                        ),
                    )
                    for b in fw["backends"]
                ),
                selection=tuple(
                    Selection(order=tuple(s["order"]), when=_plain(s.get("when")), note=s.get("note"))
                    for s in fw["selection"]
                ),
                sources=tuple(fw["sources"]),
                path=str(path),
                line=getattr(fw, "line", 0),
                covers=Coverage(**fw["covers"]) if fw.get("covers") else None,
                reached_unless=_plain(fw.get("reached_unless")),
                filters_reached_unless=_plain(fw.get("filters_reached_unless")),
            )
        )
    rules = []
    for r in doc.get("rules", ()) or ():
        fixes = r.get("fixes", ()) or ()
        rules.append(
            Rule(
                id=r["id"],
                title=r["title"].strip(),
                message=" ".join(r["message"].split()),
                when=_plain(r["when"]),
                sources=tuple(r["sources"]),
                tests=_plain(r["tests"]),
                path=str(path),
                line=getattr(r, "line", 0),
                severity=Severity(r["severity"]) if r.get("severity") else None,
                disables=r.get("disables"),
                absent=bool(r.get("absent", False)),
                area=r.get("area", "general"),
                fixes=tuple(
                    Fix(
                        description=" ".join(f["description"].split()),
                        pins=tuple(parse_pin(str(p), what="pin") for p in f.get("pins", ())),
                        env=dict(f.get("env", {})),
                        config=tuple(f.get("config", ())),
                        workload=_plain(f.get("workload", {})),
                        cost=f.get("cost"),
                        when=_plain(f["when"]) if f.get("when") else None,
                        position=n,
                    )
                    for n, f in enumerate(fixes)
                ),
                kernels=tuple(r.get("kernels", ())),
                silent_wrong_results=bool(r.get("silent_wrong_results", False)),
                # a silent wrong result never stops the run: its stage is `numbers`
                stage=r.get("stage") or ("numbers" if r.get("silent_wrong_results") else None),
                evidence=tuple(_plain(e) for e in r.get("evidence", ()) or ()),
                confidence=r.get("confidence"),
                confidence_note=r.get("confidence_note"),
                alongside=tuple((a["rule"], " ".join(a["why"].split())) for a in r.get("alongside", ()) or ()),
            )
        )
    return frameworks, rules


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


_READ_MAX = 256  # parsed, schema-checked rule files of this process, by path and bytes
_READ: "Memo[Tuple[str, str], Any]" = Memo(_READ_MAX)


def _read_file(path: Path) -> Any:
    """A rule file, parsed and checked against the schema. The same bytes at the same path are
    parsed once per process (a catalogue loaded with a --rules-dir on top, or a subset, reads the
    built-in files again); the caller gets its own top-level mapping, since `_expand` replaces
    its keys (it copies on write below that)."""
    from doctor.bounded import read_text

    text = read_text(path, what="file", error=RuleError, not_found="file not found")
    key = (str(path), hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    seen = _READ.get(key)
    if seen is not None:
        return _top_copy(seen)
    doc = load_yaml(text, str(path), error=RuleError)
    if doc is None:
        raise RuleError("empty rule file", path=str(path), hint="a rule file holds `rules:`, `frameworks:` and/or `conditions:`")
    if not isinstance(doc, dict):
        raise RuleError("top level must be a mapping with `rules:`, `frameworks:` and/or `conditions:`", path=str(path), line=1)
    errors = _schema_errors(doc)
    if errors:
        where, msg = errors[0]
        raise _fail(path, doc, where, msg, hint="see docs/rules.md for the rule schema")
    _READ.put(key, doc)
    return _top_copy(doc)


def _top_copy(doc: Any) -> Any:
    out = LineDict(doc)
    out.line = getattr(doc, "line", 0)
    out.key_lines = dict(getattr(doc, "key_lines", {}))
    return out


def _named_conditions(docs: Sequence[Tuple[Path, Any]]) -> Dict[str, Any]:
    """The catalogue's named conditions (`conditions:` of any file), by id, each checked in its
    own file; an id defined twice is an error."""
    named: Dict[str, Any] = {}
    where_defined: Dict[str, str] = {}
    for path, doc in docs:
        for i, c in enumerate(doc.get("conditions", ()) or ()):
            if c["id"] in named:
                raise _fail(path, doc, ["conditions", i, "id"], f"condition {c['id']!r} is also defined in {where_defined[c['id']]}",
                            hint="a named condition is defined once; rename one or read the other")
            named[c["id"]] = c["when"]
            where_defined[c["id"]] = str(path)
    return named


def _referenced_conditions(node: Any) -> set:
    """Every NAME of a `{condition: NAME}` leaf under `node`."""
    if isinstance(node, dict):
        if set(node) == {"condition"} and isinstance(node["condition"], str):
            return {node["condition"]}
        return set().union(*(_referenced_conditions(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_referenced_conditions(v) for v in node)) if node else set()
    return set()


def _with_catalogue_conditions(docs: Sequence[Tuple[Path, Any]], named: Dict[str, Any]) -> Dict[str, Any]:
    """`named` plus the built-in catalogue's named conditions that `docs` read but do not define.
    A named condition belongs to the whole catalogue: a file loaded on its own (a test's subset,
    `rules lint FILE`) still reads one written in another file. Only files that hold a top-level
    `conditions:` are parsed, so this stays cheap."""
    from doctor.resources import rules_dir

    wanted = set().union(*(_referenced_conditions(doc.get(k)) for _, doc in docs for k in ("rules", "frameworks", "conditions"))) - set(named)
    if not wanted:
        return named
    given = {p.resolve() for p, _ in docs}
    out = dict(named)
    for f in _files([rules_dir()]):
        if f.resolve() in given:
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except OSError:
            continue
        if not re.search(r"(?m)^conditions:", text):
            continue
        for name, when in _named_conditions([(f, _read_file(f))]).items():
            out.setdefault(name, when)
    return out


def _expand(path: Path, doc: Any, named: Mapping[str, Any]) -> None:
    """Replace each `{condition: NAME}` leaf in `doc` (rules, fixes' when, frameworks, and the
    named conditions themselves) with NAME's condition, in place."""

    def sub(node: Any, where: List[Any], stack: Tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            if set(node) == {"condition"}:
                name = node["condition"]
                if name not in named:
                    raise _fail(path, doc, where, f"unknown condition {name!r}",
                                hint="named conditions: " + (", ".join(sorted(named)) or "none") + " (a file's `conditions:`)")
                if name in stack:
                    raise _fail(path, doc, where, f"condition {name!r} refers to itself: {' -> '.join(stack + (name,))}")
                return sub(named[name], where, stack + (name,))
            changed = {k: sub(v, where + [k], stack) for k, v in node.items()}
            if any(changed[k] is not node[k] for k in node):
                copy = type(node)(changed) if type(node) is not dict else dict(changed)
                for attr in ("line", "key_lines"):
                    if hasattr(node, attr):
                        try:
                            setattr(copy, attr, getattr(node, attr))
                        except AttributeError:
                            pass
                return copy
            return node
        if isinstance(node, list):
            items = [sub(v, where + [i], stack) for i, v in enumerate(node)]
            if any(a is not b for a, b in zip(items, node)):
                copy_l = type(node)(items) if type(node) is not list else list(items)
                if hasattr(node, "line"):
                    try:
                        setattr(copy_l, "line", getattr(node, "line"))
                    except AttributeError:
                        pass
                return copy_l
            return node
        return node

    for key in ("rules", "frameworks", "conditions"):
        if key in doc:
            doc[key] = sub(doc[key], [key], ())


def load_file(path: Path, named: Optional[Mapping[str, Any]] = None) -> Tuple[List[Framework], List[Rule]]:
    doc = _read_file(path)
    _check_semantics(path, doc, named_only=True)
    if named is None:
        named = _with_catalogue_conditions([(path, doc)], _named_conditions([(path, doc)]))
    _expand(path, doc, named)
    _check_semantics(path, doc)
    return _build(path, doc)


def _files(dirs: Iterable[Path]) -> List[Path]:
    out: List[Path] = []
    for d in dirs:
        if d.is_file():
            out.append(d)
            continue
        if not d.is_dir():
            raise RuleError("no such rule file or folder", path=str(d), hint="pass a .yaml file or a folder of them")
        # rules/contracts/ holds caller/callee pairs (doctor.probe.contract_specs), rules/cluster/ the
        # cross-rank comparison table (doctor.cluster.facts), rules/releases/ the release catalogue
        # and install recipes (doctor.releases, doctor.fix.install) and rules/startup/ the
        # frameworks' start-up checks (doctor.probe.startup): not rules
        out.extend(sorted(
            p for p in d.rglob("*.y*ml")
            if p.suffix in (".yaml", ".yml") and not {"cluster", "contracts", "releases", "startup"} & set(p.relative_to(d).parts[:-1])
        ))
    return out


def check_pins_exist(rules: Sequence[Rule], directory: Optional[Path] = None) -> None:
    """`rules lint`: every fix pin of a package the release catalogue knows names one of its
    releases (a pin to a version that was never published would fail at `pip install`)."""
    from doctor.releases.catalogue import load_release_catalogue

    releases = load_release_catalogue(directory)
    for r in rules:
        for fix in r.fixes:
            for pin in fix.pins:
                name = canonical_name(pin.name)
                if releases.knows(name) and not releases.exists(name, pin.version):
                    newest = releases.versions(name)[-3:]
                    raise RuleError(
                        f"rule {r.id}: pin {pin.name}=={pin.version} is not a release of {pin.name} in the release catalogue",
                        path=r.path,
                        line=r.line,
                        hint=f"pin a published release (newest known: {', '.join(newest)}), or refresh the catalogue (attn-doctor releases refresh)",
                    )


def _check_catalogue(frameworks: Sequence[Framework], rules: Sequence[Rule], complete: bool = True) -> None:
    seen: Dict[str, Rule] = {}
    for r in rules:
        if r.id in seen:
            other = seen[r.id]
            raise RuleError(
                f"rule {r.id}: duplicate id (also at {other.path}:{other.line})",
                path=r.path,
                line=r.line,
                hint="rule ids must be unique",
            )
        seen[r.id] = r
    floors: Dict[str, Tuple[str, str]] = {}  # package -> (since, framework id)
    for fw in frameworks:
        if fw.covers is None:
            continue
        since, first = floors.setdefault(fw.covers.package, (fw.covers.since, fw.id))
        if since != fw.covers.since:
            raise RuleError(
                f"framework {fw.id}: covers {fw.covers.package} from {fw.covers.since}, but {first} from {since}",
                path=fw.path,
                line=fw.line,
                hint="one package has one coverage floor",
            )
    backend_ids: Dict[str, Framework] = {}
    for fw in frameworks:
        for b in fw.backends:
            for x in (b, *b.members):
                if x.id in backend_ids:
                    raise RuleError(f"backend {x.id}: defined twice", path=fw.path, line=fw.line)
                backend_ids[x.id] = fw
            member_ids = {m.id for m in b.members}
            for c in b.compose:
                for mid in (*c.any_of, *c.requires):
                    if mid not in member_ids:
                        raise RuleError(
                            f"backend {b.id}: compose names {mid!r}, which is not one of its members",
                            path=fw.path,
                            line=fw.line,
                            hint="members: " + ", ".join(sorted(member_ids)),
                        )
        for sel in fw.selection:
            for bid in sel.order:
                if bid not in {b.id for b in fw.backends}:
                    raise RuleError(
                        f"framework {fw.id}: selection names unknown backend {bid!r}", path=fw.path, line=fw.line
                    )

    def leaves(cond: Any) -> Iterable[Tuple[str, Dict[str, Any]]]:
        if isinstance(cond, dict):
            if "backend" in cond:
                yield cond["backend"], cond
            for key in ("all", "any"):
                for child in cond.get(key, ()):
                    yield from leaves(child)
            if "not" in cond:
                yield from leaves(cond["not"])

    fw_ids = {fw.id for fw in frameworks}
    member_of = {m.id: b.id for fw in frameworks for b in fw.backends for m in b.members}
    disables_of = {r.id: r.disables for r in rules if r.disables}
    members_of = {b.id: tuple(m.id for m in b.members) for fw in frameworks for b in fw.backends}
    for r in rules:
        for func, ref in re.findall(r"\{(reasons|selected):([^{}]+)\}", r.title + " " + r.message):
            fw_ref, _, only = ref.partition(":")
            if only and (func != "reasons" or fw_ref not in backend_ids):
                raise RuleError(f"rule {r.id}: {{{func}:{ref}}} names rules, which only {{reasons:BACKEND:RULE,...}} takes", path=r.path, line=r.line, hint="e.g. {reasons:flash_attn.fa4:FA4-HEAD-DIM}")
            unknown = [x.strip() for x in only.split(",") if only and disables_of.get(x.strip()) not in (fw_ref, *members_of.get(fw_ref, ()))]
            if unknown:
                raise RuleError(f"rule {r.id}: {{reasons:{ref}}} names {', '.join(unknown)}, not rules that disable {fw_ref}", path=r.path, line=r.line, hint="name rules whose `disables:` is that backend or one of its members")
            if fw_ref not in fw_ids and not (func == "reasons" and fw_ref in backend_ids):
                raise RuleError(f"rule {r.id}: placeholder names unknown framework {fw_ref!r}", path=r.path, line=r.line, hint="known: " + ", ".join(sorted(fw_ids)) + " ({reasons:} also takes a backend id)")
        if r.disables and r.disables not in backend_ids:
            raise RuleError(
                f"rule {r.id}: disables unknown backend {r.disables!r}",
                path=r.path,
                line=r.line,
                hint="known backends: " + ", ".join(sorted(backend_ids)),
            )
        for bid, leaf in leaves(r.when):
            if bid not in backend_ids:
                raise RuleError(f"rule {r.id}: refers to unknown backend {bid!r}", path=r.path, line=r.line)
            # a finding may ask whether one member of a family is available (e.g. te.fa3: TE runs
            # FlashAttention 3 when it is); which member is selected is not decided per member
            if bid in member_of and (r.disables or "selected" in leaf):
                raise RuleError(
                    f"rule {r.id}: refers to {bid!r}, a member of {member_of[bid]!r}",
                    path=r.path,
                    line=r.line,
                    hint=f"backend rules and `selected` read the family ({member_of[bid]}); a finding may read a member with `available`",
                )
            if r.disables:
                raise RuleError(
                    f"rule {r.id}: a backend rule may not depend on backend availability",
                    path=r.path,
                    line=r.line,
                    hint="use a finding rule for that",
                )
        for fw_ref in _framework_refs(r.when):
            if fw_ref not in fw_ids:
                raise RuleError(f"rule {r.id}: refers to unknown framework {fw_ref!r}", path=r.path, line=r.line)
        # `available_but_for` names rules that disable that very backend
        for cond in [r.when, *(f.when for f in r.fixes if f.when is not None)]:
            for bid, leaf in leaves(cond):
                for rid, key in [(x, "available_but_for") for x in leaf.get("available_but_for", ())] + [(x, "out_for") for x in leaf.get("out_for", ())]:
                    if disables_of.get(rid) != bid:
                        raise RuleError(
                            f"rule {r.id}: {key} names {rid!r}, which is not a rule that disables {bid!r}",
                            path=r.path,
                            line=r.line,
                        )
    _check_finding_refs(rules, complete)


def reads_selection(cond: Any, framework: str, backend_ids: set) -> bool:
    """Whether a condition reads what `framework` selects: a `{backend: B, selected: ...}` leaf
    for one of its backends or family members, or `{framework: F, selects/has_backend: ...}`."""
    if not isinstance(cond, dict):
        return False
    if "backend" in cond:
        return "selected" in cond and cond["backend"] in backend_ids
    if "framework" in cond:
        return cond["framework"] == framework and ("selects" in cond or "has_backend" in cond)
    kids = [*(cond.get("all", ()) or ()), *(cond.get("any", ()) or ()), *([cond["not"]] if "not" in cond else [])]
    return any(reads_selection(k, framework, backend_ids) for k in kids)


def _guard_selection(frameworks: Sequence[Framework], rules: Sequence[Rule]) -> List[Rule]:
    """A finding about which backend a framework picks (or that it has none) is reached only if
    the run gets to the framework's selection: each finding that reads it is and-ed with
    `not: <reached_unless>` of that framework, so it stays silent where an import error or a
    constructor assert stops the run first (docs/rules.md "Stages"). Findings that the stop
    condition itself reads, directly or through other findings, are left as written (no cycle)."""
    by_id = {r.id: r for r in rules}
    out = list(rules)
    for fw in frameworks:
        if not fw.reached_unless:
            continue
        ids = {b.id for b in fw.backends} | {m.id for b in fw.backends for m in b.members}
        upstream: set = set()
        todo = list(finding_refs(fw.reached_unless))
        while todo:
            rid = todo.pop()
            if rid in upstream:
                continue
            upstream.add(rid)
            if rid in by_id:
                todo.extend(by_id[rid].reads)
        guard = {"not": fw.reached_unless}
        for i, r in enumerate(out):
            if r.disables or r.id in upstream or not reads_selection(r.when, fw.id, ids):
                continue
            out[i] = replace(r, when=_guarded(r.when, fw.id, ids, guard), reached_by=fw.id)
    return out


def _guard_filters(frameworks: Sequence[Framework], rules: Sequence[Rule]) -> List[Rule]:
    """A backend rule (`disables:` a backend of a framework, or a member of one) gives a reason only
    where the framework gets to weigh its backends: each is and-ed with `not:
    <filters_reached_unless>`, so that where an earlier assert stops the run (TE's thd mask
    assert in DotProductAttention.forward) no backend is reported out for a reason TE never
    reaches (sample 42 part 4). A backend rule that states one of those stops itself (its `when`
    holds the same expanded condition, as TE-FLASH-FA2-WINDOW-TE1 holds TE 1.9-1.11's flash-attn
    version assert) is left as written: it is the reason the backend is out."""
    out = list(rules)
    for fw in frameworks:
        if not fw.filters_reached_unless:
            continue
        ids = {b.id for b in fw.backends} | {m.id for b in fw.backends for m in b.members}
        guard = {"not": fw.filters_reached_unless}
        stops = list(fw.filters_reached_unless.get("any", ())) or [fw.filters_reached_unless]
        for i, r in enumerate(out):
            if r.disables in ids and not any(_holds_subtree(r.when, stop) for stop in stops):
                out[i] = replace(r, when={"all": [r.when, guard]}, when_written=r.when)
    return out


def _holds_subtree(cond: Any, part: Any) -> bool:
    """Whether `part` is `cond` or one of its positive sub-conditions (under all:/any:, after named
    conditions are expanded). Not under `not:`: a stop a rule excludes itself is a guard it wrote,
    not the reason it states (check of the completion session: TE's NVTE_* env rules hold
    `not: mcore_nvte_env_assert` and must keep the other stops' guard)."""
    if cond == part:
        return True
    if not isinstance(cond, dict):
        return False
    kids = [*(cond.get("all", ()) or ()), *(cond.get("any", ()) or ())]
    return any(_holds_subtree(k, part) for k in kids)


def _guarded(cond: Any, framework: str, ids: set, guard: Mapping[str, Any]) -> Any:
    """`cond` with each part that reads `framework`'s choice and-ed with `guard`: a leaf, or a
    `not:` as a whole; `all:`/`any:` are rebuilt around their guarded parts, so an `any:` branch
    about another library (transformers' flash_attention_2 calling flash-attn itself) keeps firing
    where only TE stops (check-R1 of sample 26)."""
    if not reads_selection(cond, framework, ids):
        return cond
    for key in ("all", "any"):
        if key in cond:
            return {**cond, key: [_guarded(k, framework, ids, guard) for k in cond[key]]}
    return {"all": [cond, guard]}


def unguarded(cond: Any, guard: Mapping[str, Any]) -> Any:
    """`cond` as written: `_guarded`'s `{all: [part, guard]}` wrappers taken off again."""
    if isinstance(cond, dict):
        if set(cond) == {"all"} and len(cond["all"]) == 2 and cond["all"][1] == guard:
            return unguarded(cond["all"][0], guard)
        for key in ("all", "any"):
            if key in cond:
                return {**cond, key: [unguarded(k, guard) for k in cond[key]]}
    return cond


def finding_refs(cond: Any) -> List[str]:
    """The rule ids a condition reads through `{finding: ID, fired: ...}` leaves."""
    if not isinstance(cond, dict):
        return []
    if "finding" in cond:
        return [str(cond["finding"])]
    kids = [*(cond.get("all", ()) or ()), *(cond.get("any", ()) or ()), *([cond["not"]] if "not" in cond else [])]
    return [rid for k in kids for rid in finding_refs(k)]


def _check_finding_refs(rules: Sequence[Rule], complete: bool = True) -> None:
    """`finding:` leaves and `alongside:` entries name finding rules; findings read each other
    without a cycle (the evaluator orders them by these reads). A partial catalogue (some shipped
    files without the built-in set, as tests load them) may name a rule it did not load: a rule
    that is not loaded never fires, and an `alongside:` entry only documents. The whole catalogue,
    and any --rules-dir on top of it, must resolve every name."""
    by_id = {r.id: r for r in rules}
    for r in rules:
        refs = list(r.reads)
        if refs and r.disables:
            raise RuleError(f"rule {r.id}: a backend rule may not depend on a finding", path=r.path, line=r.line,
                            hint="findings are evaluated after backend availability")
        for rid, what in [(x, "refers to") for x in refs] + [(a, "lists alongside") for a, _ in r.alongside]:
            other = by_id.get(rid)
            if other is None and not complete:
                continue
            if other is None or other.disables or rid == r.id:
                raise RuleError(f"rule {r.id}: {what} {rid!r}, which is not another finding rule", path=r.path, line=r.line,
                                hint="name a finding rule's id")
    state: Dict[str, int] = {}

    def visit(r: Rule, chain: List[str]) -> None:
        if state.get(r.id) == 2:
            return
        if state.get(r.id) == 1:
            raise RuleError(f"rule {r.id}: findings read each other in a cycle: {' -> '.join(chain + [r.id])}",
                            path=r.path, line=r.line, hint="one of them must not depend on the other")
        state[r.id] = 1
        for rid in r.reads:
            if rid in by_id:
                visit(by_id[rid], chain + [r.id])
        state[r.id] = 2

    for r in rules:
        visit(r, [])


def _version_leaves(cond: Any) -> Iterable[Tuple[str, str]]:
    """Every `{package: P, version: SPEC}` leaf of a condition."""
    if isinstance(cond, dict):
        if "package" in cond and isinstance(cond.get("version"), str):
            yield str(cond["package"]), cond["version"]
        for key in ("all", "any"):
            for child in cond.get(key, ()) or ():
                yield from _version_leaves(child)
        if "not" in cond:
            yield from _version_leaves(cond["not"])


def _framework_refs(cond: Any) -> Iterable[str]:
    if isinstance(cond, dict):
        if "framework" in cond:
            yield cond["framework"]
        for key in ("all", "any"):
            for child in cond.get(key, ()):
                yield from _framework_refs(child)
        if "not" in cond:
            yield from _framework_refs(cond["not"])


# --------------------------------------------------------------------------- cache


def _cache_dir() -> Optional[Path]:
    from doctor.cachedir import default_cache_dir

    return default_cache_dir(os.environ)


def _fingerprint(files: Sequence[Path], *, content: bool = False) -> str:
    """The files' identity: paths, sizes and times, or (`content`) paths and bytes."""
    h = hashlib.sha256(str(CACHE_FORMAT).encode())
    for p in files:
        if content:
            h.update(f"{p.resolve()}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
        else:
            st = p.stat()
            h.update(f"{p.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return ("content-" if content else "") + h.hexdigest()[:24]


class CasesText(Mapping[str, Any]):
    """A rule's test cases kept as the cache's JSON text and decoded on first use: `check` never
    reads them, and they are close to half the cached catalogue (decoding them cost it ~45 % of
    its load); `rules lint` and the tests that read them decode each rule's once."""

    __slots__ = ("_text", "_doc")

    def __init__(self, text: str) -> None:
        self._text = text
        self._doc: Optional[Dict[str, Any]] = None

    def _cases(self) -> Dict[str, Any]:
        if self._doc is None:
            self._doc = json.loads(self._text)
        return self._doc

    def __getitem__(self, key: str) -> Any:
        return self._cases()[key]

    def __iter__(self) -> Any:
        return iter(self._cases())

    def __len__(self) -> int:
        return len(self._cases())

    def __repr__(self) -> str:
        return repr(self._cases())


def _to_json(frameworks: Sequence[Framework], rules: Sequence[Rule]) -> Dict[str, Any]:
    from dataclasses import asdict

    def rule_doc(r: Rule) -> Dict[str, Any]:
        doc = asdict(replace(r, tests={}))
        doc["tests"] = json.dumps(dict(r.tests))  # decoded when read (CasesText)
        return doc

    return {"frameworks": [asdict(f) for f in frameworks], "rules": [rule_doc(r) for r in rules]}


def _backend_from_json(b: Mapping[str, Any]) -> Backend:
    return Backend(
        **{
            **b,
            "members": tuple(_backend_from_json(m) for m in b.get("members", ())),
            "compose": tuple(
                Compose(**{**c, "any_of": tuple(c["any_of"]), "requires": tuple(c["requires"])}) for c in b.get("compose", ())
            ),
        }
    )


def _from_json(doc: Mapping[str, Any]) -> Catalogue:
    fws = tuple(
        Framework(
            **{
                **f,
                "backends": tuple(_backend_from_json(b) for b in f["backends"]),
                "selection": tuple(Selection(**{**s, "order": tuple(s["order"])}) for s in f["selection"]),
                "sources": tuple(f["sources"]),
                "covers": Coverage(**f["covers"]) if f.get("covers") else None,
            }
        )
        for f in doc["frameworks"]
    )
    rules = tuple(
        Rule(
            **{
                **r,
                "sources": tuple(r["sources"]),
                "tests": CasesText(r["tests"]),
                "severity": Severity(r["severity"]) if r["severity"] else None,
                "fixes": tuple(
                    Fix(
                        **{
                            **x,
                            "pins": tuple(Pin(p["name"], p["version"], tuple(p["extras"])) for p in x["pins"]),
                            "config": tuple(x["config"]),
                            "brings_up": tuple(x["brings_up"]),
                            "moves": tuple(x.get("moves", ())),
                            "unsure": tuple(x.get("unsure", ())),
                        }
                    )
                    for x in r["fixes"]
                ),
                "kernels": tuple(r["kernels"]),
                "evidence": tuple(r.get("evidence", ())),
                "alongside": tuple(tuple(a) for a in r.get("alongside", ())),
            }
        )
        for r in doc["rules"]
    )
    return Catalogue(fws, rules)


def _catalogue_root(path: Path) -> Optional[Path]:
    """The folder at or above `path` laid out like the shipped catalogue (backends/ and findings/)."""
    for d in (path, *path.parents):
        if (d / "backends").is_dir() and (d / "findings").is_dir():
            return d
    return None


def _shadowed(builtin: Path, extra_files: Sequence[Path]) -> set:
    """Built-in files that a linted copy of the same file replaces (same path inside a
    catalogue-shaped folder), so `rules lint rules` on a source tree is not a duplicate of the
    installed copy."""
    out = set()
    for f in extra_files:
        root = _catalogue_root(f.resolve().parent)
        if root is not None:
            twin = builtin / f.resolve().relative_to(root)
            if twin.is_file():
                out.add(twin.resolve())
    return out


# a fix's workload value that is one whole placeholder, filled in when the rule fires
WHOLE_PLACEHOLDER = re.compile(r"^\{([a-z_]+(?:\.[A-Za-z0-9_\-]+)+)\}$")

_LOADED_MAX = 4  # a long-lived process (tests, cluster) that reads many rule folders keeps only the latest
_LOADED: "Memo[str, Catalogue]" = Memo(_LOADED_MAX)  # per process, by the files' fingerprint (wherever the cache folder is)


def load_catalogue(extra_dirs: Sequence[Path] = (), *, builtin: bool = True, use_cache: bool = True, shadow: bool = False) -> Catalogue:
    """The built-in catalogue plus the user's --rules-dir folders, validated. With `shadow`
    (rules lint), a file in the extra folders replaces the built-in file at the same place in a
    catalogue-shaped folder instead of duplicating its rules."""
    from doctor.resources import rules_dir

    files = _files(list(extra_dirs))
    if builtin:
        hidden = _shadowed(rules_dir().resolve(), files) if shadow else set()
        files = [f for f in _files([rules_dir()]) if f.resolve() not in hidden] + files
    cache_file = None
    fingerprint = None
    # the rules are checked against rules/startup/ too (a `startup.<id>` fact must name a check
    # it ships): a changed start-up file must load and check them again; and a subset still
    # reads named conditions from the other built-in files: they count too
    def inputs() -> List[Path]:
        startup = sorted((rules_dir() / "startup").glob("*.yaml"))
        others = [] if builtin else [f for f in _files([rules_dir()]) if f not in files]
        return [*files, *startup, *others]

    try:
        # This process's catalogues, by their files: sizes and times where the disk cache is used;
        # bytes without it (rules lint, the tests, which load the whole catalogue in ~30 modules),
        # so that any changed byte, even at the same size and time, loads and checks anew. And
        # `builtin`: a whole-folder subset loaded without the built-in set skips the
        # complete-catalogue checks, so it must not stand in for the catalogue itself
        fingerprint = f"{builtin}-" + _fingerprint(inputs(), content=not use_cache)
        seen = _LOADED.get(fingerprint)
        if seen is not None:
            # this process read them already (even if the cache folder moved since, as
            # $XDG_CACHE_HOME does between tests)
            return seen
        if use_cache:
            cache_dir = _cache_dir()
            cache_file = cache_dir / f"catalogue-{fingerprint}.json" if cache_dir else None
            if cache_file and cache_file.is_file():
                return _LOADED.put(fingerprint, _from_json(json.loads(cache_file.read_text(encoding="utf-8"))))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # an unreadable file is reported by the load below; a stale cache is rebuilt and overwritten
    frameworks: List[Framework] = []
    rules: List[Rule] = []
    docs = [(f, _read_file(f)) for f in files]
    named = _named_conditions(docs)
    if not builtin:
        named = _with_catalogue_conditions(docs, named)
    for f, doc in docs:
        _check_semantics(f, doc, named_only=True)
    for f, doc in docs:
        _expand(f, doc, named)
        _check_semantics(f, doc)
        fws, rs = _build(f, doc)
        frameworks.extend(fws)
        rules.extend(rs)
    rules = _guard_selection(frameworks, rules)
    rules = _guard_filters(frameworks, rules)
    _check_catalogue(frameworks, rules, complete=builtin)
    cat = Catalogue(tuple(frameworks), tuple(rules))
    if fingerprint is not None:
        _LOADED.put(fingerprint, cat)
    if cache_file is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(_to_json(frameworks, rules)), encoding="utf-8")
            os.replace(tmp, cache_file)
            from doctor.cachedir import prune

            prune(cache_file.parent, "catalogue-*.json")
        except OSError:
            pass  # a read-only home only costs speed
    return cat
