"""Plan one consistent set of changes that clears the error and warning findings.

    candidates   each fired finding's own fixes (rules/findings/*.yaml), plus versions generated
                 from the release catalogue: the nearest releases of every package the rule's
                 condition names, torch releases (with the CUDA and cuDNN they bundle), and
                 cuDNN wheels for torch's CUDA major. Pins that are not real releases, do not
                 install on this Python, or break another package's requirements are dropped.
    search       uniform-cost search over sets of candidates, cheapest first:
                 (torch moves, config changes, fixes with a stated cost such as a slower
                 kernel, packages changed, flash-attn source builds, version distance, env
                 changes). A set is tried by re-running every rule on
                 the facts as they would be (doctor.assume: a torch pin also moves CUDA and
                 cuDNN); findings it creates become new targets, so a candidate that triggers
                 another rule is only kept together with a fix for that rule.
    result       a frozen FixPlan: pins, env, config, what stays unresolved, the flash-attn
                 wheel to install, conflicts pip will report, alternatives, and steps.

Pure: no I/O, no printing. A process that plans the same inputs twice (`check` then `fix` in one
process, as the tests do) gets the plan it computed the first time (the last few are kept). `doctor.fix.pinfile` writes the pins; doctor/report/fix_*.py render.
"""

from __future__ import annotations

import heapq
import itertools
import json
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from doctor.errors import InputError
from doctor.memo import Memo
from doctor.fix.companions import torch_companions
from doctor.fix.install import extras_for, install_commands
from doctor.fix.recheck import apply_fix, compare, marker_machine, moved_text, pip_moves
from doctor.fix.resolve import Resolution, resolve
from doctor.releases.wheels import WheelChoice, choose_wheel, flash_attn_unbuildable, source_build_fails, wheel_target
from doctor.model import Facts, Finding, Fix, Pin, Severity, Workload
from doctor.releases.catalogue import ASCEND_NPU, non_cuda_gpu_torch, ReleaseCatalogue, cuda_major_after, torch_bundle
from doctor.rules.conditions import Context
from doctor.rules.evaluate import Diagnosis, diagnose, offered_fixes, render, render_workload, unsure_note
from doctor.rules.loader import Catalogue, Rule
from doctor.versions import parse_version, version_matches
from doctor.workload import FLAG_NAMES

TARGET_SEVERITIES = (Severity.ERROR, Severity.WARNING)
MAX_EVALUATIONS = 600  # sets of candidates re-checked per plan (each is one `diagnose`)
PER_DIRECTION = 2  # generated versions kept below and above the installed one
SCAN_PER_DIRECTION = 40  # versions looked at on each side before giving up


# --------------------------------------------------------------------------- values


class _ReadsFix:
    """Read-through to the Fix a plan entry carries (`change.pins` is `change.fix.pins`)."""

    fix: Fix

    @property
    def description(self) -> str:
        return self.fix.description

    @property
    def pins(self) -> Tuple[Pin, ...]:
        return self.fix.pins

    @property
    def env(self) -> Mapping[str, Optional[str]]:
        return self.fix.env

    @property
    def config(self) -> Tuple[str, ...]:
        return self.fix.config

    @property
    def workload(self) -> Mapping[str, Any]:
        return self.fix.workload

    @property
    def cost(self) -> Optional[str]:
        return self.fix.cost


@dataclass(frozen=True)
class Change(_ReadsFix):
    """One candidate: a Fix (rendered for these facts) for a rule, taken from the rule's own
    `fixes` or generated from the release catalogue."""

    rule_id: str
    fix: Fix
    origin: str = "rule"  # rule | catalogue | companion


    @property
    def key(self) -> Tuple[Any, ...]:
        return (tuple(sorted(self.pins)), tuple(sorted(self.env.items(), key=str)), json.dumps(dict(self.workload), sort_keys=True))


@dataclass(frozen=True)
class Step:
    """One thing for the user to do, in order."""

    kind: str  # pip | wheel | build | env | config | note | manual | verify
    text: str
    command: str = ""
    rule_ids: Tuple[str, ...] = ()
    cost: str = ""


@dataclass(frozen=True)
class Alternative(_ReadsFix):
    """Another way to clear some findings, with what it costs and brings up."""

    rule_ids: Tuple[str, ...]
    fix: Fix
    why: str = ""



@dataclass(frozen=True)
class FixPlan:
    pins: Tuple[Pin, ...]
    env: Mapping[str, Optional[str]]  # None: unset the variable
    config: Tuple[str, ...]
    workload_changes: Mapping[str, Any]
    changes: Tuple[Change, ...]  # the chosen candidates (and companions), in step order
    targets: Tuple[Finding, ...]  # the fired error/warning findings the plan is for
    cleared: Tuple[str, ...]
    unresolved: Tuple[str, ...]
    not_evaluated: Tuple[str, ...]  # findings that could not be evaluated (missing facts)
    new_findings: Tuple[str, ...] = ()  # warnings the plan brings up because nothing clears the errors without them
    steps: Tuple[Step, ...] = ()
    conflicts: Tuple[str, ...] = ()  # what pip will report as conflicting
    wheels: Tuple[WheelChoice, ...] = ()
    alternatives: Tuple[Alternative, ...] = ()
    notes: Tuple[str, ...] = ()
    torch_reason: Optional[str] = None  # why torch must move, when it does
    verified: bool = False  # every rule re-run with the plan assumed: the cleared findings are gone, no new error
    catalogue_date: str = ""
    resolution: Optional[Resolution] = None  # the plan resolved over the catalogue's Requires-Dist (doctor.fix.resolve)
    kept_warnings: Tuple[str, ...] = ()  # warnings left as they are: clearing them moves a package or adds a conflict (see alternatives)

    @property
    def complete(self) -> bool:
        return not self.unresolved


# --------------------------------------------------------------------------- helpers


def _v(text: str) -> Any:
    return parse_version(text) or parse_version("0")


def distance(a: Optional[str], b: str, ordered: Sequence[str] = ()) -> int:
    """How far apart two versions are: a major step outweighs any number of minor steps, a
    minor step outweighs patch steps; patch steps count releases between (when known)."""
    if a is None:
        return 50
    va, vb = _v(a), _v(b)
    ra = (list(va.release) + [0, 0])[:2]
    rb = (list(vb.release) + [0, 0])[:2]
    if ra[0] != rb[0]:
        return 10000 * abs(ra[0] - rb[0])
    steps = 1
    if ordered and a in ordered and b in ordered:
        steps = abs(ordered.index(a) - ordered.index(b))
    elif va != vb:
        steps = max(1, abs(((list(va.release) + [0, 0, 0])[2]) - ((list(vb.release) + [0, 0, 0])[2])))
    return 100 * abs(ra[1] - rb[1]) + min(steps, 99)


def _leaves(cond: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(cond, Mapping):
        for key in ("all", "any"):
            if key in cond:
                for child in cond[key]:
                    yield from _leaves(child)
                return
        if "not" in cond:
            yield from _leaves(cond["not"])
            return
        yield cond


def _fired_bad(diag: Diagnosis) -> List[str]:
    return [f.rule_id for f in diag.findings if f.status == "fired" and f.severity in TARGET_SEVERITIES]


def _mm(version: Optional[str]) -> Optional[str]:
    if not version:
        return None
    v = parse_version(version)
    return f"{v.major}.{v.minor}" if v else None


# --------------------------------------------------------------------------- the planner


@dataclass
class _Merged:
    pins: Dict[str, str]
    env: Dict[str, Optional[str]]
    workload: Dict[str, Any]
    config: List[str]
    companions: List[Change]
    notes: List[str]


@dataclass
class _Eval:
    merged: _Merged
    facts: Facts
    workload: Workload
    diagnosis: Diagnosis
    bad: Tuple[str, ...]
    cost: Tuple[int, ...]


class _Planner:
    def __init__(self, rel: ReleaseCatalogue, cat: Catalogue, facts: Facts, workload: Workload, before: Diagnosis) -> None:
        self.rel, self.cat, self.facts, self.workload, self.before = rel, cat, facts, workload, before
        self.installed: Dict[str, str] = dict(facts.packages or {})
        self.torch0: Optional[str] = facts.torch.version or self.installed.get("torch")
        # an Ascend NPU torch: torch-npu is built for one torch release (ReleaseCatalogue.cuda_build_ok)
        self._npu: bool = "torch-npu" in self.installed
        pv = parse_version(facts.python.version) if facts.python.version else None
        self.python: Optional[str] = f"{pv.major}.{pv.minor}" if pv else None
        self.env0: Dict[str, str] = dict(facts.env or {})
        plat = facts.platform
        self.platform: Optional[str] = f"{plat.system}-{plat.machine}" if plat.system and plat.machine else None
        self.targets: List[str] = _fired_bad(before)
        self.notes: List[str] = []
        self.pool: List[Change] = []
        self.by_rule: Dict[str, List[int]] = {}
        self.evals: Dict[FrozenSet[int], Optional[_Eval]] = {}
        self.installable_memo: Dict[Tuple[Tuple[str, str], ...], bool] = {}
        self.noop_settings: Dict[Tuple[str, str], bool] = {}  # workload settings equal to the current workload
        # facts and workload as a merged set of changes leaves them, and their diagnosis (None:
        # the pins break an installed release's requirements); two sets of candidates that
        # merge to the same pins, env and workload are checked once
        self.applied: Dict[Tuple[Any, ...], Tuple[Facts, Workload, Optional[Diagnosis]]] = {}
        self.baseline_violations = set(self._violations(self.installed))
        self.warning_only: Dict[str, List[Change]] = {}  # warning fixes kept out of the plan (they move a package or conflict)

    def _is_warning(self, rule_id: str) -> bool:
        try:
            return self.cat.rule(rule_id).severity == Severity.WARNING
        except KeyError:
            return False

    def _warning_ok(self, change: Change) -> bool:
        """A warning is cleared only by a change that moves no installed package (torch
        included) and adds no conflict: env, config and workload changes qualify."""
        for pin in change.pins:
            have = self._current(pin.name)
            if have is not None and _v(have).public != _v(pin.version).public:
                return False
        merged = self.merge([change])
        return merged is not None and not _conflicts(self, merged)

    # ---------------------------------------------------------------- consistency

    def _release(self, name: str, version: str) -> Any:
        pkg = self.rel.packages.get(name)
        return pkg.get(version) if pkg else None

    def _violations(self, packages: Mapping[str, str]) -> List[str]:
        """Requirements of installed releases (requires, works_with) that `packages` break."""
        out: List[str] = []
        for name, version in packages.items():
            parsed = parse_version(version)
            rel = self._release(name, parsed.public if parsed is not None else version)
            if rel is None:
                continue
            for other, spec in list(rel.requires.items()) + list(rel.works_with.items()):
                have = packages.get(other)
                if have is not None and not version_matches(have, spec):
                    out.append(f"{name} {version} needs {other}{spec}, not {have}")
        return out

    def _installs_here(self, name: str, version: str) -> bool:
        """Does PyPI have this release for this Python and this platform (where known)?"""
        return (
            self.rel.python_ok(name, version, self.python)
            and self.rel.platform_ok(name, version, self.platform)
            and self.rel.cuda_build_ok(name, version, self.platform, self.torch0, rocm=bool(self.facts.torch.hip), npu=self._npu)
        )

    def cudnn_dist(self, torch_version: Optional[str] = None) -> Optional[str]:
        cuda = None
        if torch_version is None:
            cuda = self.facts.torch.cuda
            torch_version = self.torch0
        if cuda is None and torch_version:
            b = torch_bundle(torch_version)
            cuda = b.cuda if b else None
        if not cuda:
            return None
        return f"nvidia-cudnn-cu{_v(cuda).major}"

    # ---------------------------------------------------------------- candidates

    def _check_pin(self, rule_id: str, pin: Pin) -> Optional[Pin]:
        """A rule's pin, as a real release that fits, or None (with a note saying why)."""
        text = str(pin)
        name, version = pin.name, pin.version
        if name.startswith("nvidia-cudnn-cu"):
            want = self.cudnn_dist()
            if want and want != name:
                pkg = self.rel.packages.get(want)
                newer = [v for v in (pkg.versions if pkg else ()) if _v(v) >= _v(version)]
                if not newer:
                    self.notes.append(f"{rule_id}: {text} is for another CUDA major and {want} has no {version} or newer")
                    return None
                self.notes.append(f"{rule_id}: {text} becomes {want}=={newer[0]} to match torch's CUDA major")
                name, version = want, newer[0]
        if name == "torch":
            known = torch_bundle(version)
            if self.rel.torch_row(version) is None or known is None or known.version != version:
                self.notes.append(f"{rule_id}: torch=={version} is not in the torch table (its CUDA and cuDNN are unknown); not pinned")
                return None
        elif not self.rel.knows(name):
            self.notes.append(f"{rule_id}: {name} is not in the release catalogue, so {text} cannot be checked; not pinned")
            return None
        elif not self.rel.exists(name, version):
            self.notes.append(f"{rule_id}: {name}=={version} is not a release on PyPI; nearby releases are tried instead")
            return None
        if not self.rel.platform_ok(name, version, self.platform):
            self.notes.append(f"{rule_id}: PyPI has no {name}=={version} wheel for {self.platform}; not pinned")
            return None
        if not self.rel.cuda_build_ok(name, version, self.platform, self.torch0, rocm=bool(self.facts.torch.hip), npu=self._npu):
            gpu = non_cuda_gpu_torch(self.torch0, bool(self.facts.torch.hip), self._npu)
            if gpu == ASCEND_NPU:
                self.notes.append(f"{rule_id}: {name}=={version} would leave torch-npu without the torch release it is built for (move both by hand); not pinned")
            elif gpu:
                self.notes.append(f"{rule_id}: {name}=={version} from PyPI is no {gpu} build (use PyTorch's {gpu} index by hand); not pinned")
            else:
                self.notes.append(f"{rule_id}: PyPI's {name}=={version} for {self.platform} is a CPU-only build; not pinned")
            return None
        if not self.rel.python_ok(name, version, self.python):
            self.notes.append(f"{rule_id}: {name}=={version} does not install on Python {self.python}")
            return None
        return Pin(name, version, pin.extras)

    def _companions(self, name: str, version: str) -> Optional[List[Pin]]:
        """Pins a release needs besides itself (its Requires-Dist on packages we track)."""
        rel = self._release(name, version)
        out: List[Pin] = []
        if rel is None:
            return out
        for other, spec in list(rel.requires.items()) + list(rel.works_with.items()):
            have = self.installed.get(other)
            if have is None or version_matches(have, spec):
                continue
            ok = [v for v in self.rel.versions(other) if version_matches(v, spec) and self._installs_here(other, v) and not _v(v).is_prerelease]
            if not ok:
                return None
            best = min(ok, key=lambda v: distance(have, v, self.rel.versions(other)))
            out.append(Pin(other, best))
        return out

    def _add(self, change: Change) -> bool:
        """Keep a candidate that clears its finding on its own; True when it also leaves no
        new error or warning (it may still be kept: another fix could cover what it triggers)."""
        idx = self.by_rule.setdefault(change.rule_id, [])
        if any(self.pool[i].key == change.key for i in idx):
            return False
        if self._is_warning(change.rule_id) and not self._warning_ok(change):
            self.warning_only.setdefault(change.rule_id, []).append(change)
            return False
        ev = self.evaluate_changes([change])
        if ev is None or change.rule_id in ev.bad:
            return False
        self.pool.append(change)
        idx.append(len(self.pool) - 1)
        self.evals[frozenset({len(self.pool) - 1})] = ev
        return not (set(ev.bad) - set(self.targets))

    def _current(self, name: str) -> Optional[str]:
        if name == "torch":
            return self.torch0
        if name.startswith("nvidia-cudnn-cu"):
            return self.installed.get(name) or self.facts.cudnn.version
        return self.installed.get(name)

    @staticmethod
    def _generated(fix: Fix, undecided: Optional[Fix]) -> Fix:
        """A version generated in a direction only undecided fixes point: as undecided as they."""
        return replace(fix, when=undecided.when, unsure=undecided.unsure) if undecided is not None else fix

    def _generate_versions(self, rule: Rule, name: str, current: Optional[str], ways: Set[str], undecided: Optional[Fix] = None) -> None:
        ordered = self.rel.versions(name)
        if not ordered:
            return
        pre_ok = current is not None and _v(current).is_prerelease
        pool = [
            v
            for v in ordered
            if v != current and v != "0.0.0" and (pre_ok or not _v(v).is_prerelease) and self._installs_here(name, v)
        ]
        if current is None:
            sides = [sorted(pool, key=_v, reverse=True)]
        else:
            cur = _v(current)
            below = sorted((v for v in pool if _v(v) < cur), key=lambda v: distance(current, v, ordered))
            above = sorted((v for v in pool if _v(v) > cur), key=lambda v: distance(current, v, ordered))
            sides = [below if "down" in ways else [], above if "up" in ways else []]
        for side in sides:
            kept = 0
            for version in side[:SCAN_PER_DIRECTION]:
                extra = self._companions(name, version)
                if extra is None:
                    continue
                pins = (Pin(name, version), *extra)
                verb = "Install" if current is None else ("Downgrade" if _v(version) < _v(current) else "Upgrade")
                desc = f"{verb} {name}{' ' + current if current else ''} -> {version}"
                if extra:
                    desc += " (with " + ", ".join(str(p) for p in extra) + ", which it requires)"
                cost = None
                if name == "torch":
                    b = self.rel.torch_row(version)
                    desc = f"Move torch {current} -> {version} (bundles CUDA {b.cuda}, cuDNN {b.cudnn})" if b else desc
                    cost = "a torch change: flash-attn and TransformerEngine must be reinstalled for it"
                change = Change(rule.id, self._generated(Fix(desc, pins=pins, cost=cost), undecided), origin="catalogue")
                if self._add(change):
                    kept += 1
                if kept >= PER_DIRECTION:
                    break

    def candidates(self, rule_id: str) -> List[int]:
        if rule_id in self.by_rule:
            return self.by_rule[rule_id]
        self.by_rule[rule_id] = []
        try:
            rule = self.cat.rule(rule_id)
        except KeyError:
            return []
        # 1. the rule's own fixes
        # in the context `check` evaluated (backends, call path): a fix whose `when:` is false
        # there is not offered, so neither planned nor a direction to generate releases in
        ctx = self.before.context(self.facts, self.workload)
        offered = [replace(fix, unsure=unsure) for fix, unsure in offered_fixes(rule.fixes, ctx)]
        for fix in offered:
            if not fix.checkable:
                continue  # advice that cannot be re-checked stays advice
            pins: List[Pin] = []
            ok = True
            for raw in fix.pins:
                checked = self._check_pin(rule_id, raw)
                if checked is None:
                    ok = False
                    break
                extra = self._companions(checked.name, checked.version)
                if extra is None:
                    ok = False
                    break
                for pin in [checked, *extra]:
                    if pin.name not in {x.name for x in pins}:
                        pins.append(pin)
            if not ok:
                continue
            rendered = replace(
                fix,
                description=" ".join(render(fix.description, ctx).split()),
                pins=tuple(pins),
                env={k: None if v is None else str(v) for k, v in dict(fix.env).items()},
                cost=render(fix.cost, ctx) if fix.cost else None,
                workload=render_workload(fix.workload, ctx),
            )
            if not rendered.checkable:
                continue  # its only change reads a fact not known here
            self._add(Change(rule_id, rendered, origin="rule"))
        # 2. versions generated from the release catalogue, for the packages the rule's own fixes
        #    pin and in the direction they move them (a rule that fixes by downgrading flash-attn
        #    gets the nearest lower flash-attn that fits; moving out of a range the other way
        #    could drop the feature the workload uses).
        directions: Dict[str, Set[str]] = {}
        # a direction that only undecided fixes point (a Linux-only pin where the platform is not
        # known) is as undecided: the versions generated in it carry that fix's `when:` and why
        undecided: Dict[str, Fix] = {}
        decided: Set[str] = set()
        for fix in offered:
            for pin in fix.pins:
                name, version = pin.name, pin.version
                if name.startswith("nvidia-cudnn-cu"):
                    name = self.cudnn_dist() or name
                for key in {name, "torch"} if pin.name.startswith("nvidia-cudnn-cu") else {name}:
                    if fix.unsure:
                        undecided.setdefault(key, fix)
                    else:
                        decided.add(key)
                current = self._current(name)
                if current is None or _v(version) == _v(current):
                    continue
                directions.setdefault(name, set()).add("down" if _v(version) < _v(current) else "up")
                if name.startswith("nvidia-cudnn-cu"):
                    directions.setdefault("torch", set()).add("down" if _v(version) < _v(current) else "up")
        for key in decided:
            undecided.pop(key, None)
        for name, ways in directions.items():
            if name == "torch":
                if self.torch0:
                    self._generate_torch(rule, ways, undecided.get("torch"))
            elif self.rel.knows(name):
                self._generate_versions(rule, name, self._current(name), ways, undecided.get(name))
        return self.by_rule[rule_id]

    def _generate_torch(self, rule: Rule, ways: Set[str], undecided: Optional[Fix] = None) -> None:
        # Only torch releases the what-if (doctor.assume) also knows, so that a plan and
        # `check --assume torch==X` agree on the CUDA and cuDNN it brings.
        rows = [
            r
            for r in self.rel.torch
            if _v(r.version).base_version != _v(self.torch0 or "0").base_version
            and (torch_bundle(r.version) or r).version == r.version
            and torch_bundle(r.version) is not None
        ]
        driver = self.facts.cuda.driver_cuda
        rows = [r for r in rows if self._installs_here("torch", r.version) and not (driver and r.cuda and _v(r.cuda) > _v(driver))]
        cur = _v(self.torch0 or "0")
        order = [r.version for r in self.rel.torch]
        below = [r for r in rows if _v(r.version) < cur] if "down" in ways else []
        above = [r for r in rows if _v(r.version) > cur] if "up" in ways else []
        for side in (below, above):
            kept = 0
            for row in sorted(side, key=lambda r: distance(self.torch0, r.version, order)):
                clean = self._add(
                    Change(
                        rule.id,
                        self._generated(Fix(
                            f"Move torch {self.torch0} -> {row.version} (bundles CUDA {row.cuda}, cuDNN {row.cudnn})",
                            pins=(Pin("torch", row.version),),
                            cost="a torch change: flash-attn and TransformerEngine must be reinstalled for it",
                        ), undecided),
                        origin="catalogue",
                    )
                )
                if clean:
                    kept += 1
                if kept >= PER_DIRECTION:
                    break

    # ---------------------------------------------------------------- evaluation

    def merge(self, changes: Sequence[Change]) -> Optional[_Merged]:
        pins: Dict[str, str] = {}
        env: Dict[str, Optional[str]] = {}
        wl: Dict[str, Any] = {}
        config: List[str] = []
        for ch in changes:
            for pin in ch.pins:
                name, version = pin.name, pin.version
                if pins.get(name, version) != version:
                    return None
                pins[name] = version
            for k, v in ch.env.items():
                if k in env and env[k] != v:
                    return None
                env[k] = v
            for k, v in ch.workload.items():
                if k in wl and wl[k] != v:
                    if isinstance(v, Mapping) and isinstance(wl[k], Mapping):
                        both = {**wl[k], **v}
                        if any(wl[k].get(x, both[x]) != both[x] or v.get(x, both[x]) != both[x] for x in both):
                            return None
                        wl[k] = both
                        continue
                    return None
                wl[k] = v
            config.extend(c for c in ch.config if c not in config)
        merged = _Merged(pins=pins, env=env, workload=wl, config=config, companions=[], notes=[])
        self._torch_companions(merged)
        self._exact_pin_companions(merged)
        why = flash_attn_unbuildable(self.rel, self.facts, merged.pins)
        if why:
            why = f"not planned: {why}"
            if why not in self.notes:
                self.notes.append(why)
            return None
        return merged

    def _exact_pin_companions(self, merged: _Merged) -> None:
        """A torch move carries the installed torchvision, torchaudio and xformers to the releases
        built for the new torch (doctor.fix.companions): their wheels pin torch exactly."""
        new = merged.pins.get("torch")
        if not new or _v(new).base_version == _v(self.torch0 or "0").base_version:
            return
        pins, advice = torch_companions(self.rel, {k: v for k, v in self.installed.items() if k not in merged.pins}, new)
        for pin in pins:
            merged.pins[pin.name] = pin.version
            merged.companions.append(
                Change("", Fix(f"Move {pin.name} {self.installed[pin.name]} to {pin.version}, the release built for torch {new}", pins=(pin,)), origin="companion")
            )
        merged.notes.extend(a for a in advice if a not in merged.notes)

    def _torch_companions(self, merged: _Merged) -> None:
        """A torch move needs flash-attn rebuilt for it: reinstall the same release from a
        wheel for the new torch, or move to the nearest release that has one."""
        new = merged.pins.get("torch")
        if not new or _mm(new) == _mm(self.torch0) or "flash-attn" not in self.installed or "flash-attn" in merged.pins:
            return
        target = wheel_target(self.facts, new)
        if target is None:
            return
        current = self.installed["flash-attn"]
        base = _v(current).public
        if choose_wheel(self.rel, base, target).available:
            merged.pins["flash-attn"] = base
            merged.companions.append(
                Change("", Fix(f"Reinstall flash-attn {base} built for torch {_mm(new)}", pins=(Pin("flash-attn", base),)), origin="companion")
            )
            return
        ordered = self.rel.versions("flash-attn")
        final = {**self.installed, **merged.pins}
        windows = [spec for name, ver in final.items() for rel in [self._release(name, _v(ver).public)] if rel for other, spec in rel.works_with.items() if other == "flash-attn"]
        fits = [
            v
            for v in ordered
            if not _v(v).is_prerelease
            and all(version_matches(v, s) for s in windows)
            and choose_wheel(self.rel, v, target).available
        ]
        if fits:
            best = min(fits, key=lambda v: distance(current, v, ordered))
            merged.pins["flash-attn"] = best
            merged.companions.append(
                Change(
                    "",
                    Fix(f"flash-attn {current} has no wheel for torch {_mm(new)}: move to {best}, the nearest that has one", pins=(Pin("flash-attn", best),)),
                    origin="companion",
                )
            )
        else:
            fails = source_build_fails(base, target)
            merged.notes.append(
                f"no flash-attn release has a prebuilt wheel for torch {_mm(new)}: rebuild flash-attn {current} from source after moving torch"
                + (f" ({fails})" if fails else "")
            )

    def _apply(self, merged: _Merged) -> Tuple[Facts, Workload]:
        as_fix = Fix("plan", pins=tuple(Pin(k, v) for k, v in merged.pins.items()), env=merged.env, workload=merged.workload)
        return apply_fix(self.facts, self.workload, as_fix)

    def cost(self, merged: _Merged, changes: Sequence[Change] = ()) -> Tuple[int, ...]:
        # what pip moves besides the pins costs what a pin of it would (doctor.fix.recheck.pip_moves)
        moved = pip_moves(self.facts, Fix("plan", pins=tuple(Pin(k, v) for k, v in merged.pins.items()))) if merged.pins else ()
        pins = {**merged.pins, **{p.name: p.version for p in moved}}
        torch_moved = int("torch" in pins and _v(pins["torch"]).base_version != _v(self.torch0 or "0").base_version)
        changed = [n for n, v in pins.items() if self.installed.get(n) != v and not (n == "torch" and not torch_moved)]
        builds = 0
        new_line = torch_moved and _mm(pins["torch"]) != _mm(self.torch0)
        fa = pins.get("flash-attn") or (self.installed.get("flash-attn") if new_line else None)
        if fa:
            if new_line and "flash-attn" not in changed:
                changed.append("flash-attn")  # reinstalled for the new torch either way
            target = wheel_target(self.facts, pins.get("torch"))
            if target is not None and not choose_wheel(self.rel, _v(fa).public, target).available:
                builds = 1
        dist = 0
        for n in changed:
            if n not in pins:
                continue
            current = self.installed.get(n)
            if current is None and n.startswith("nvidia-cudnn-cu"):
                current = self.facts.cudnn.version
            dist += distance(current, pins[n], self.rel.versions(n) or [r.version for r in self.rel.torch])
        env_changes = sum(1 for k, v in merged.env.items() if self.env0.get(k) != v)
        costly = sum(1 for ch in changes if ch.cost and not ch.pins)
        # TransformerEngine's torch extension builds from source (PyPI ships it as an sdist)
        builds += sum(1 for n in changed if n.startswith("transformer-engine"))
        prerelease = 0
        if fa and not builds:
            target = wheel_target(self.facts, pins.get("torch"))
            row = next((b for b in self.rel.flash_attn_wheels.get(_v(fa).public, ()) if target is not None and b.torch == target.torch_mm), None)
            prerelease = int(row is not None and _v(row.torch_build).is_prerelease)
        conflicts = len(_conflicts(self, merged))
        settings = sum(1 for k, v in merged.workload.items() if not self._noop_setting(k, v))
        return (torch_moved, settings, costly, conflicts, len(changed), builds, prerelease, dist, env_changes)

    def _noop_setting(self, key: str, value: Any) -> bool:
        """A workload setting the workload already has (a fix that states `attn_implementation:
        flash_attention_2` where it is flash_attention_2) changes nothing and costs nothing."""
        memo = (key, repr(value))
        if memo not in self.noop_settings:
            from doctor.assume import apply_workload

            try:
                self.noop_settings[memo] = apply_workload(self.workload, {key: value}) == self.workload
            except InputError:  # a setting the workload cannot take is not a no-op
                self.noop_settings[memo] = False
        return self.noop_settings[memo]

    def evaluate_changes(self, changes: Sequence[Change]) -> Optional[_Eval]:
        merged = self.merge(changes)
        if merged is None:
            return None
        key = (tuple(merged.pins.items()), tuple(merged.env.items()), repr(merged.workload))
        if key not in self.applied:
            facts, workload = self._apply(merged)
            broken = set(self._violations(dict(facts.packages or {}))) - self.baseline_violations
            self.applied[key] = (facts, workload, None if broken else diagnose(self.cat, facts, workload))
        facts, workload, diag = self.applied[key]
        if diag is None:
            return None
        bad = _fired_bad(diag)
        # Cleared means evaluated and false (as in doctor.rules.evaluate.fix_clears): a change
        # that only makes a target undecidable has not fixed it.
        bad += [t for t in self.targets if t not in bad and diag.result(t).status != "passed"]
        for ch in changes:
            if ch.rule_id and ch.rule_id not in bad and diag.result(ch.rule_id).status != "passed":
                bad.append(ch.rule_id)
        return _Eval(merged=merged, facts=facts, workload=workload, diagnosis=diag, bad=tuple(bad), cost=self.cost(merged, changes))

    def installable(self, ev: _Eval) -> bool:
        """The pins resolve over the packages' real Requires-Dist, or conflict only with torch's
        exact cuDNN pin (the one conflict a plan may carry, with its alternative). A pin can be
        clean for the rules and still uninstallable: TE 1.9's torch extension caps flash-attn."""
        if not ev.merged.pins:
            return True
        key = tuple(sorted(ev.merged.pins.items()))
        if key not in self.installable_memo:
            cuda_major = _cuda_major(self, ev.merged.pins.get("torch"))
            extras = {n: extras_for(self.rel, n, v, cuda_major) for n, v in ev.merged.pins.items()}
            res = resolve(self.rel, self.installed, [(n, v, extras.get(n, ())) for n, v in ev.merged.pins.items()], self.python, cuda_major, self.facts.requires, marker_machine(self.facts))
            self.installable_memo[key] = all(c.name.startswith("nvidia-cudnn-cu") for c in res.conflicts)
        return self.installable_memo[key]

    def evaluate(self, state: FrozenSet[int]) -> Optional[_Eval]:
        if state not in self.evals:
            self.evals[state] = self.evaluate_changes([self.pool[i] for i in sorted(state)])
        return self.evals[state]

    # ---------------------------------------------------------------- search

    def search(self, allow: Optional[Any] = None) -> Tuple[FrozenSet[int], Optional[_Eval]]:
        """Cheapest set of candidates that leaves no fixable error or warning; else the set that
        clears the most targets without creating anything new."""
        targets = set(self.targets)
        start: FrozenSet[int] = frozenset()
        ev0 = self.evaluate(start)
        assert ev0 is not None
        heap: List[Tuple[Tuple[int, ...], int, FrozenSet[int]]] = [(ev0.cost, 0, start)]
        seen: Set[FrozenSet[int]] = {start}
        counter = itertools.count(1)
        errors0 = {f.rule_id for f in ev0.diagnosis.findings if f.status == "fired" and f.severity == "error"}
        best: Tuple[Tuple[Any, ...], FrozenSet[int]] = ((len(errors0 & set(ev0.bad)), len(ev0.bad), 0, ev0.cost), start)
        evaluations = 0

        def finished(ev: _Eval) -> bool:  # nothing new fires, nothing left has a candidate, pip can install it
            return not any(r not in targets or self.candidates(r) for r in ev.bad) and self.installable(ev)

        clean: List[Tuple[Tuple[int, ...], List[int], FrozenSet[int]]] = []  # finished plans seen
        while heap and evaluations < MAX_EVALUATIONS:
            _, _, state = heapq.heappop(heap)
            ev = self.evaluate(state)
            if ev is None:
                continue
            if finished(ev):
                return state, ev
            new = [r for r in ev.bad if r not in targets]
            fixable = [r for r in ev.bad if self.candidates(r)]
            errors = {f.rule_id for f in ev.diagnosis.findings if f.status == "fired" and f.severity == "error"}
            if not errors.intersection(new):
                # Fallback when no clean plan exists: fewest errors, then fewest warnings (an
                # error traded for a new warning, e.g. wrong results for a slower kernel, counts).
                key = (len(errors & set(ev.bad)), len(ev.bad), len(new), ev.cost)
                if key < best[0]:
                    best = (key, state)
            if not fixable:
                continue
            # Expand on the first finding still firing: with its own candidates, and with any
            # other firing finding's candidate that clears it too (one env setting can fix two).
            rule_id = fixable[0]
            options = list(self.candidates(rule_id))
            for other in fixable[1:]:
                for idx in self.candidates(other):
                    single = self.evaluate(frozenset({idx}))
                    if idx not in options and single is not None and rule_id not in single.bad:
                        options.append(idx)
            for idx in options:
                if idx in state or (allow is not None and not allow(self.pool[idx])):
                    continue
                nxt = state | {idx}
                if nxt in seen:
                    continue
                seen.add(nxt)
                ev2 = self.evaluate(nxt)
                evaluations += 1
                if ev2 is None:
                    continue
                if finished(ev2):
                    clean.append((ev2.cost, sorted(nxt), nxt))
                heapq.heappush(heap, (ev2.cost, next(counter), nxt))
        if clean:
            # The budget ran out before the cheapest clean plan was popped; a clean plan seen on
            # the way still beats one that leaves an error.
            cheapest = min(clean)[2]
            return cheapest, self.evaluate(cheapest)
        return best[1], self.evaluate(best[1])


# --------------------------------------------------------------------------- assembling the plan


def _conflicts(planner: _Planner, merged: _Merged) -> List[str]:
    """Pins pip will refuse or warn about: a cuDNN wheel other than the one torch pins exactly."""
    out: List[str] = []
    torch_v = merged.pins.get("torch") or planner.torch0
    bundle = torch_bundle(torch_v) if torch_v else None
    for name, version in merged.pins.items():
        if not name.startswith("nvidia-cudnn-cu") or bundle is None or not bundle.cudnn:
            continue
        if bundle.cudnn_dist == name and bundle.cudnn != version:
            out.append(
                f"torch {torch_v} requires {name}=={bundle.cudnn} exactly: pip will report a conflict "
                f"(\"torch {torch_v} requires {name}=={bundle.cudnn}, but you have {name} {version} which is incompatible\"). "
                f"It works if installed after torch, but the next `pip install torch` puts {bundle.cudnn} back."
            )
    return out


def _cuda_major(planner: _Planner, torch_v: Optional[str]) -> Optional[int]:
    return cuda_major_after(torch_v, planner.torch0, planner.facts.torch.cuda)


def _steps(planner: _Planner, ev: _Eval, changes: Sequence[Change], wheels: Sequence[WheelChoice], conflicting: Sequence[str]) -> List[Step]:
    """Install commands from rules/releases/install.json (doctor.fix.install), in order, each
    with its cost; then env and config changes, notes and the re-check."""
    merged = ev.merged
    steps: List[Step] = []
    by_pkg: Dict[str, Tuple[str, ...]] = {}
    for ch in changes:
        for p in ch.pins:
            by_pkg.setdefault(p.name, tuple(x for x in (ch.rule_id,) if x))
    cmds = install_commands(
        planner.rel, merged.pins, planner.installed, planner.torch0, wheels, conflicting,
        _cuda_major(planner, merged.pins.get("torch")),
    )
    for c in cmds:
        steps.append(Step(c.kind, c.text, c.command, by_pkg.get(c.package, ()), c.cost))
    for name, value in sorted(merged.env.items()):
        if value is None:
            steps.append(Step("env", f"Unset {name}", f"unset {name}"))
        else:
            steps.append(Step("env", f"Set {name}={value} in the training environment", f"export {name}={value}"))
    for item in merged.config:
        steps.append(Step("config", item))
    for note in merged.notes:
        steps.append(Step("note", note))
    for ch in changes:
        if ch.fix.unsure:  # offered though its `when:` could not be decided here: say so by the plan
            steps.append(Step("note", f"{ch.rule_id}'s fix may not apply here: {unsure_note(ch.fix)}", rule_ids=(ch.rule_id,)))
    cmd = " ".join(["attn-doctor check", *check_args(merged.pins, merged.env, merged.workload)])
    steps.append(Step("verify", "Re-check with the plan assumed (what-if) before installing; after installing, run `attn-doctor check` again", cmd))
    return steps


def check_args(pins: Mapping[str, str], env: Mapping[str, Optional[str]], workload: Mapping[str, Any]) -> List[str]:
    """The `check` arguments that assume a plan: --assume, --assume-env and workload flags."""
    args = [f"--assume {k}=={v}" for k, v in sorted(pins.items(), key=lambda kv: (kv[0] != "torch", kv[0]))]
    args += [f"--assume-env {k}={v}" if v is not None else f"--assume-env {k}" for k, v in sorted(env.items())]
    for key, value in sorted(workload.items()):
        if key == "context_parallel" and isinstance(value, Mapping):
            if "size" in value:
                args.append(f"--cp-size {value['size']}")
            if "comm_type" in value:
                args.append(f"--cp-comm-type {value['comm_type']}")
            if "impl" in value:
                args.append(f"--cp-impl {value['impl']}")
            if "attn_implementation" in value:
                args.append(f"--cp-attn-implementation {value['attn_implementation']}")
        elif isinstance(value, bool):
            args.append(f"--{key.replace('_', '-')}" if value else f"--no-{key.replace('_', '-')}")
        elif key in FLAG_NAMES:  # `--distributed` is check's own option: the strategy's flag is --strategy
            args.append(f"--{FLAG_NAMES[key]} {value}")
        elif isinstance(value, (list, tuple)):
            args.append(f"--{key.replace('_', '-')} {','.join(str(x) for x in value)}")
        else:
            args.append(f"--{key.replace('_', '-')} {value}")
    return args


def with_inputs(plan: FixPlan, args: Sequence[str]) -> FixPlan:
    """The plan with the user's own inputs (--env, --workload, workload flags) added to its
    verify step, so the command re-checks the same environment and workload."""
    if not args:
        return plan
    steps = tuple(replace(s, command=s.command + " " + " ".join(args)) if s.kind == "verify" else s for s in plan.steps)
    return replace(plan, steps=steps)


def _alt_cost(planner: _Planner, pins: Sequence[Pin]) -> str:
    """What installing an alternative costs, in the words of its install steps."""
    merged = {p.name: p.version for p in pins}
    wheels: List[WheelChoice] = []
    if "flash-attn" in merged:
        target = wheel_target(planner.facts, merged.get("torch"))
        if target is not None:
            wheels.append(choose_wheel(planner.rel, merged["flash-attn"], target))
    cmds = install_commands(planner.rel, merged, planner.installed, planner.torch0, wheels, (), _cuda_major(planner, merged.get("torch")))
    return "; ".join(f"{c.package}: {c.brief}" for c in cmds)


def _with_companions(fix: Fix, ev: _Eval) -> Fix:
    """The fix as it was evaluated: a torch move carries the flash-attn reinstall it needs
    (_torch_companions), so the alternative shows, and `check` re-checks, the same change; where
    no flash-attn wheel fits, the planner's note (rebuild it from source) is shown as advice."""
    extra = tuple(p for c in ev.merged.companions for p in c.fix.pins if p not in fix.pins)
    notes = tuple(n for n in ev.merged.notes if n not in fix.config)
    if notes:
        fix = replace(fix, config=fix.config + notes)
    if not extra:
        return fix
    words = "; ".join(c.fix.description for c in ev.merged.companions)
    return replace(fix, pins=fix.pins + extra, description=f"{fix.description}; {words}")


def _alternatives(planner: _Planner, chosen: FrozenSet[int]) -> List[Alternative]:
    out: List[Alternative] = []
    chosen_keys = {planner.pool[i].key for i in chosen}
    for rule_id in planner.targets:
        idxs = [i for i in planner.candidates(rule_id) if planner.pool[i].key not in chosen_keys]
        ranked = []
        for i in idxs:
            ev = planner.evaluate(frozenset({i}))
            if ev is None or rule_id in ev.bad:
                continue
            # the same words `check` uses for the same fix (doctor.fix.recheck)
            result = compare(planner.before, ev.diagnosis, tuple(planner.targets))
            # one that trades the finding for a new error is listed only after those that do not
            ranked.append((bool(result.new_errors), ev.cost, i, result.side_effects, _with_companions(planner.pool[i].fix, ev)))
        for _, cost, i, effects, fix in sorted(ranked, key=lambda r: (r[0], r[1], r[2]))[:3]:
            ch = planner.pool[i]
            whys = [effects] if effects else []
            if cost[3]:
                whys.append("pip reports a conflict with torch's exact cuDNN pin")
            if cost[0]:
                whys.append("moves torch")
            moved = moved_text(planner.facts, Fix("alternative", pins=tuple(fix.pins)))
            if moved:
                whys.append("pip also moves " + ", ".join(moved))
            install = _alt_cost(planner, ch.pins)
            if install:
                whys.append("install: " + install)
            out.append(Alternative((rule_id,), fix, "; ".join(whys)))
        # fixes a warning may not use in the main plan (they move a package or conflict)
        for ch in planner.warning_only.get(rule_id, [])[:3]:
            ev = planner.evaluate_changes([ch])
            if ev is None or rule_id in ev.bad:
                continue
            merged = planner.merge([ch])
            whys = ["kept out of the plan: clearing a warning may not " + ("add a conflict" if merged is not None and _conflicts(planner, merged) else "move an installed package")]
            effects = compare(planner.before, ev.diagnosis, tuple(planner.targets)).side_effects
            if effects:
                whys.append(effects)
            install = _alt_cost(planner, ch.pins)
            if install:
                whys.append("install: " + install)
            # shown as evaluated (a torch move with the flash-attn reinstall it needs), so that
            # `check`'s re-check of the alternative gives the same verdict
            out.append(Alternative((rule_id,), _with_companions(ch.fix, ev), "; ".join(whys)))
    return out


# Plans this process computed, by their inputs: the catalogues by identity (each entry holds them,
# so an id is not reused while it is kept) and the facts, workload and diagnosis by value (their
# reprs spell out every field). Planning is pure, so an equal input gets an equal plan.
_PLANS_MAX = 8
_PLANS: "Memo[Tuple[Any, ...], Tuple[ReleaseCatalogue, Catalogue, FixPlan]]" = Memo(_PLANS_MAX)


def plan_fixes(
    rel: ReleaseCatalogue,
    cat: Catalogue,
    facts: Facts,
    workload: Workload,
    diagnosis: Optional[Diagnosis] = None,
) -> FixPlan:
    """The least change that clears every fired error and warning finding it can, verified by
    re-running every rule with the plan assumed."""
    key = (id(rel), id(cat), repr(facts), repr(workload), None if diagnosis is None else repr(diagnosis))
    kept = _PLANS.get(key)
    if kept is not None and kept[0] is rel and kept[1] is cat:
        return kept[2]
    return _PLANS.put(key, (rel, cat, _plan(rel, cat, facts, workload, diagnosis)))[2]


def _plan(rel: ReleaseCatalogue, cat: Catalogue, facts: Facts, workload: Workload, diagnosis: Optional[Diagnosis]) -> FixPlan:
    before = diagnosis or diagnose(cat, facts, workload)
    planner = _Planner(rel, cat, facts, workload, before)
    targets = tuple(f for f in before.findings if f.status == "fired" and f.severity in TARGET_SEVERITIES)
    not_evaluated = tuple(f.rule_id for f in before.findings if f.status == "not_evaluated")
    state, ev = planner.search()
    assert ev is not None
    conflicts = _conflicts(planner, ev.merged)
    alternatives: List[Alternative] = []
    if conflicts:
        # The alternative the issue asks for: the same findings cleared without a pin that
        # contradicts torch's own requirements (typically a torch whose cuDNN is new enough).
        dist = {n for n in ev.merged.pins if n.startswith("nvidia-cudnn-cu")}
        alt_state, alt_ev = planner.search(allow=lambda ch: not any(p.name in dist for p in ch.pins) and not ch.workload)
        if alt_ev is not None and alt_state != state and not (set(alt_ev.bad) & set(planner.targets) - set(ev.bad)):
            alternatives.append(
                Alternative(
                    tuple(sorted(set(planner.targets) - set(alt_ev.bad))),
                    Fix(
                        "Without the conflicting cuDNN pin: " + "; ".join(planner.pool[i].description for i in sorted(alt_state)),
                        pins=_ordered_pins(alt_ev.merged.pins),
                        env=dict(alt_ev.merged.env),
                        config=tuple(alt_ev.merged.config),
                        cost="; ".join(c for c in (planner.pool[i].cost for i in sorted(alt_state)) if c) or None,
                    ),
                    "; ".join(x for x in ("pip installs it without complaint", compare(planner.before, alt_ev.diagnosis, tuple(planner.targets)).side_effects, "install: " + _alt_cost(planner, _ordered_pins(alt_ev.merged.pins))) if x),
                )
            )
    alternatives.extend(_alternatives(planner, state))
    changes = [planner.pool[i] for i in sorted(state, key=lambda i: planner.targets.index(planner.pool[i].rule_id) if planner.pool[i].rule_id in planner.targets else 99)]
    changes.extend(ev.merged.companions)
    wheels: List[WheelChoice] = []
    if "flash-attn" in ev.merged.pins:
        target = wheel_target(facts, ev.merged.pins.get("torch"))
        if target is not None:
            wheels.append(choose_wheel(rel, ev.merged.pins["flash-attn"], target))
    cleared = tuple(r for r in planner.targets if r not in ev.bad)
    kept = tuple(r for r in planner.targets if r in ev.bad and r in planner.warning_only and not planner.candidates(r))
    unresolved = tuple(r for r in planner.targets if r in ev.bad and r not in kept)
    new_findings = tuple(r for r in ev.bad if r not in planner.targets)
    torch_reason = None
    if ev.cost[0]:
        new_t = ev.merged.pins["torch"]
        b = torch_bundle(new_t)
        why = [planner.pool[i].rule_id for i in state if any(p.name == "torch" for p in planner.pool[i].pins)]
        torch_reason = (
            f"torch {planner.torch0} -> {new_t}: no set of changes that keeps torch {planner.torch0} clears "
            f"{', '.join(why) or ', '.join(cleared)}; torch {new_t} bundles CUDA {b.cuda if b else '?'} and cuDNN {b.cudnn if b else '?'}"
        )
    cuda_major = _cuda_major(planner, ev.merged.pins.get("torch"))
    extras = {n: extras_for(rel, n, v, cuda_major) for n, v in ev.merged.pins.items()}
    resolution = resolve(rel, planner.installed, [(n, v, extras.get(n, ())) for n, v in ev.merged.pins.items()], planner.python, cuda_major, planner.facts.requires, marker_machine(planner.facts))
    conflicting = sorted({n for n in ev.merged.pins if n.startswith("nvidia-cudnn-cu")}) if conflicts else []
    if resolution.conflicts:
        conflicts = list(conflicts) + [str(c) for c in resolution.conflicts if not any(c.subject in x for x in conflicts)]
    if conflicts and conflicting:
        pins_text = " ".join(f"{n}=={ev.merged.pins[n]}" for n in conflicting)
        conflicts.append(
            f"To make it stick: install torch first, then {pins_text} with --no-deps; keep `{pins_text}` in a constraints file "
            f"(`attn-doctor fix --pin --constraints` writes one) and pass `-c constraints-attn.txt` to every later pip install, so a "
            f"torch reinstall fails loudly instead of silently putting the old cuDNN back. Undone by: any `pip install torch` (or of a "
            f"package that requires torch) without that constraints file. The conflict-free alternative moves torch (see Alternatives)."
        )
    steps = _steps(planner, ev, changes, wheels, conflicting)
    manual: List[Step] = []
    for finding in targets:
        if finding.rule_id not in unresolved:
            continue
        for fix in finding.fixes:
            if fix.checkable:
                continue
            text = f"{finding.rule_id} (cannot be re-checked, do it by hand): {' '.join(fix.description.split())}"
            manual.append(Step("manual", text, "; ".join(render(c, Context(facts, workload)) for c in fix.config), (finding.rule_id,)))
    steps = steps[:-1] + manual + steps[-1:]
    return FixPlan(
        pins=_ordered_pins(ev.merged.pins, extras),
        env=MappingProxyType(dict(sorted(ev.merged.env.items()))),
        config=tuple(ev.merged.config),
        workload_changes=MappingProxyType(dict(ev.merged.workload)),
        changes=tuple(changes),
        targets=targets,
        cleared=cleared,
        unresolved=unresolved,
        not_evaluated=not_evaluated,
        new_findings=new_findings,
        steps=tuple(steps),
        conflicts=tuple(conflicts),
        wheels=tuple(wheels),
        alternatives=tuple(alternatives),
        notes=tuple(dict.fromkeys([*planner.notes, *ev.merged.notes, *_moves_note(planner.facts, ev.merged.pins)])),
        torch_reason=torch_reason,
        verified=not (set(new_findings) & {f.rule_id for f in ev.diagnosis.findings if f.severity == "error"}),
        catalogue_date=rel.retrieved,
        resolution=resolution,
        kept_warnings=kept,
    )


def _moves_note(facts: Facts, pins: Mapping[str, str]) -> Tuple[str, ...]:
    """'pip also moves transformers 4.57.1 -> 4.52.4 ...' where the plan's pins make pip move
    an installed package (the plan was judged with it moved: doctor.fix.recheck.pip_moves)."""
    moved = moved_text(facts, Fix("plan", pins=tuple(Pin(k, v) for k, v in pins.items()))) if pins else ()
    if not moved:
        return ()
    return (f"pip also moves {', '.join(moved)}: the plan's pins require it, and the plan was re-checked with it moved",)


def _ordered_pins(pins: Mapping[str, str], extras: Optional[Mapping[str, Tuple[str, ...]]] = None) -> Tuple[Pin, ...]:
    """torch first (what builds against it comes after), then by name; with the extras the
    install commands use (`transformer-engine[pytorch]`)."""
    return tuple(Pin(k, v, tuple((extras or {}).get(k, ()))) for k, v in sorted(pins.items(), key=lambda kv: (kv[0] != "torch", kv[0])))
