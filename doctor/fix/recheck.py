"""Re-checking a fix: the one definition of "verified", shared by `check` and `fix`.

A fix is applied to the facts and the workload (doctor.assume: a torch pin also moves the CUDA
and cuDNN it bundles) and every rule is evaluated again. The fix is **verified** for a finding
when the finding's rule then evaluates to false (not merely undecidable), no error fires that
did not fire before, and each pin installs here: a release PyPI has for this Python and
platform, which breaks no installed package's real Requires-Dist (what pip would report after
installing it: transformer-engine-torch 1.10's flash-attn<=2.4.2 under a flash-attn 2.7 pin).
Warnings it brings up do not unverify it, but they are part of the result, and both commands
show them ("brings up TE-REQ-CUDNN-9-3").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Set, Tuple

from doctor.assume import apply_env, apply_pins, apply_workload
from doctor.fix.companions import with_torch_companions
from doctor.memo import Memo
from doctor.model import Facts, Finding, Fix, Pin, Severity, Workload
from doctor.rules.conditions import Context
from doctor.rules.evaluate import Diagnosis, diagnose, render_workload
from doctor.rules.loader import Catalogue
from doctor.versions import canonical_name, parse_version

if TYPE_CHECKING:
    from doctor.releases.catalogue import ReleaseCatalogue


@dataclass(frozen=True)
class Recheck:
    """What re-evaluating the catalogue with a fix applied showed."""

    cleared: Tuple[str, ...]  # target rules that now evaluate to false
    still: Tuple[str, ...]  # target rules that still fire or became undecidable
    new_errors: Tuple[str, ...]
    new_warnings: Tuple[str, ...]
    diagnosis: Diagnosis
    # pins PyPI has no release of for this Python or platform (the release catalogue's
    # Requires-Python and wheel platforms: what `fix` refuses to pin as well)
    uninstallable: Tuple[str, ...] = ()
    moves: Tuple[str, ...] = ()  # installed packages pip would move besides the pins (pip_moves)
    # a switch of attn_implementation to a library none of whose backends can run here (no_backend)
    no_backend: Tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        return not self.still and not self.new_errors and not self.uninstallable and not self.no_backend

    @property
    def side_effects(self) -> str:
        """'' or a short phrase naming what the fix brings up."""
        parts = list(self.uninstallable) + list(self.no_backend)
        if self.new_errors:
            parts.append("also triggers " + ", ".join(self.new_errors))
        if self.new_warnings:
            parts.append("brings up warning " + ", ".join(self.new_warnings))
        return "; ".join(parts)


def apply_fix(facts: Facts, workload: Workload, fix: Fix) -> Tuple[Facts, Workload]:
    """Facts and workload as they would be with `fix` applied (torch pins first: its bundle
    resets cuDNN, and an explicit cuDNN pin then wins). The installed packages pip would move
    to satisfy the pins (`pip_moves`: ms-swift 3.7.0's transformers<4.56 takes an installed
    transformers 4.57.1 down to 4.55.4) move too, so the re-check sees what pip leaves."""
    if fix.pins:
        facts = apply_pins(facts, with_pip_moves(facts, fix.pins))
    if fix.env:
        facts = apply_env(facts, dict(fix.env))
    if fix.workload:  # a value copying another key ({workload.num_heads}) reads the workload before the fix
        workload = apply_workload(workload, render_workload(fix.workload, Context(facts, workload)))
    return facts, workload


_MOVES: "Memo[Tuple[Any, ...], Tuple[Pin, ...]]" = Memo(256)


def with_pip_moves(facts: Facts, pins: Sequence[Pin]) -> List[Pin]:
    """`pins` plus what pip would move to satisfy them (pip_moves), in the order apply_pins
    takes them: torch first (its bundle resets cuDNN, and an explicit cuDNN pin then wins)."""
    moved = pip_moves(facts, Fix("pins", pins=tuple(pins)))
    return sorted([*pins, *moved], key=lambda p: (p.name != "torch", p.name))


def marker_machine(facts: Facts) -> str:
    """The machine Requires-Dist markers are read for: the snapshot's, x86-64 where unknown."""
    return facts.platform.machine or "x86_64"


def pip_moves(facts: Facts, fix: Fix) -> Tuple[Pin, ...]:
    """The installed packages, other than the fix's own pins, whose version pip would change
    to satisfy the pins' Requires-Dist (the resolver prefers what is installed and otherwise
    takes the newest release that fits, as pip does), through the pins or other such moves
    (doctor.fix.resolve's `forced`): each as the pin pip in effect applies.
    torch's own CUDA libraries (nvidia-*) are left to the torch bundle (doctor.assume). None
    where the pins do not resolve (`uninstallable` reports that) or nothing is installed, and
    on a host other than Linux: the release catalogue holds Linux builds' Requires-Dist (an
    sdist's PKG-INFO is one platform's: axolotl 0.15.0 pins torch on Linux only). Markers are
    read for the snapshot's own machine (x86-64 where it is not known).

    A probed snapshot (it carries the installed packages' own Requires-Dist, `facts.requires`)
    lists every installed distribution, so a move through a package the pins newly bring in is
    pip's too (llamafactory 0.9.4 takes transformers 4.51.3 to 4.57.1 through the trl it adds);
    a partial list (a rule's test case, a hand-written snapshot) counts only the moves the pins
    force themselves, since the package it leaves out is likely installed at a fitting version."""
    installed = dict(facts.packages or {})
    if not fix.pins or not installed:
        return ()
    plat = facts.platform
    if plat.system is not None and plat.system != "linux":
        return ()
    machine = marker_machine(facts)
    pv = parse_version(facts.python.version) if facts.python.version else None
    python = f"{pv.major}.{pv.minor}" if pv else None
    pins = tuple(sorted((p.name, p.version, tuple(p.extras)) for p in fix.pins))
    key = (tuple(sorted(installed.items())), pins, python, machine, facts.torch.version, facts.torch.cuda,
           tuple(sorted((k, tuple(v)) for k, v in (facts.requires or {}).items())))
    seen = _MOVES.get(key)
    if seen is not None:
        return seen
    from doctor.fix.resolve import resolve
    from doctor.releases.catalogue import cuda_major_after, load_release_catalogue

    torch_pin = next((p.version for p in fix.pins if p.name == "torch"), None)
    cuda_major = cuda_major_after(torch_pin, facts.torch.version or installed.get("torch"), facts.torch.cuda)
    rel = load_release_catalogue()
    res = resolve(rel, installed, pins, python, cuda_major, facts.requires, machine)
    pinned = {canonical_name(p.name) for p in fix.pins}
    by_name = {canonical_name(n): n for n in installed}
    moves: List[Pin] = []
    complete = facts.requires is not None
    if res.ok:
        for name in (res.changed if complete else res.forced):
            if name in pinned or name.startswith("nvidia-") or name not in by_name:
                continue
            if not (rel.versions(name) or (name == "torch" and rel.torch)):
                continue  # a package the catalogue does not list: the resolver's floor, not pip's choice
            moves.append(Pin(by_name[name], res.versions[name]))
    return _MOVES.put(key, tuple(moves))


def moved_text(facts: Facts, fix: Fix) -> Tuple[str, ...]:
    """'transformers 4.57.1 -> 4.55.4' for each package pip would move besides the pins."""
    installed = facts.packages or {}
    return tuple(f"{p.name} {installed.get(p.name, '?')} -> {p.version}" for p in pip_moves(facts, fix))


def uninstallable(facts: Facts, fix: Fix) -> Tuple[str, ...]:
    """The fix's pins that do not install here: the release catalogue knows the release and
    says it needs another Python, or has no wheel for this OS and machine, or (torch) only a
    CPU-only wheel for it (ReleaseCatalogue.cuda_build_ok). Unknown Python,
    platform or release: not counted (the planner's `_check_pin` makes the same checks)."""
    if not fix.pins:
        return ()
    from doctor.releases.catalogue import ASCEND_NPU, load_release_catalogue, non_cuda_gpu_torch

    rel = load_release_catalogue()
    pv = parse_version(facts.python.version) if facts.python.version else None
    python = f"{pv.major}.{pv.minor}" if pv else None
    plat = facts.platform
    platform = f"{plat.system}-{plat.machine}" if plat.system and plat.machine else None
    torch0 = facts.torch.version or (facts.packages or {}).get("torch")
    npu = "torch-npu" in (facts.packages or {})
    out: List[str] = []
    for pin in fix.pins:
        if not rel.python_ok(pin.name, pin.version, python):
            out.append(f"{pin.name}=={pin.version} does not install on Python {python}")
        elif not rel.platform_ok(pin.name, pin.version, platform):
            out.append(f"PyPI has no {pin.name}=={pin.version} wheel for {platform}")
        elif not rel.cuda_build_ok(pin.name, pin.version, platform, torch0, rocm=bool(facts.torch.hip), npu=npu):
            gpu = non_cuda_gpu_torch(torch0, bool(facts.torch.hip), npu)
            if gpu == ASCEND_NPU:
                out.append(f"{pin.name}=={pin.version} would leave torch-npu without the torch release it is built for")
            elif gpu:
                out.append(f"{pin.name}=={pin.version} from PyPI is no {gpu} build: it would replace this {gpu} torch")
            else:
                out.append(f"PyPI's {pin.name}=={pin.version} for {platform} is a CPU-only build")
        elif pin.name == "flash-attn":
            from doctor.releases.wheels import flash_attn_unbuildable

            why = flash_attn_unbuildable(rel, facts, {p.name: p.version for p in fix.pins})
            if why:
                out.append(why)
    if not out:
        out.extend(_breaks_installed(rel, facts, fix, python))
    return tuple(out)


def _breaks_installed(rel: "ReleaseCatalogue", facts: Facts, fix: Fix, python: Optional[str]) -> List[str]:
    """What pip would report after installing the pins over this environment: a requirement of
    an installed package (its real Requires-Dist) that the pins break, e.g. transformer-engine-torch
    1.10's flash-attn<=2.4.2 under a flash-attn 2.7.4.post1 pin (doctor.fix.resolve, offline). A
    cuDNN pin over torch's exact one is the planner's one allowed conflict and is not counted."""
    from doctor.fix.resolve import resolve
    from doctor.releases.catalogue import cuda_major_after

    installed = dict(facts.packages or {})
    if not installed:
        return []
    torch_pin = next((p.version for p in fix.pins if p.name == "torch"), None)
    cuda_major = cuda_major_after(torch_pin, facts.torch.version or installed.get("torch"), facts.torch.cuda)
    res = resolve(rel, installed, [(p.name, p.version, p.extras) for p in fix.pins], python, cuda_major, facts.requires, marker_machine(facts))
    pinned = {p.name for p in fix.pins}
    # pip's check after installing (a requirement broken by what would be installed), or a
    # resolution that an installed, unpinned package's requirement makes impossible; not a pin
    # the release catalogue cannot resolve on its own (a torch it holds no bundle for: no
    # statement about this environment), nor torch's exact cuDNN pin under a cuDNN pin
    return [
        f"pip would report: {c}"
        for c in res.conflicts
        if not c.name.startswith("nvidia-cudnn-cu") and (c.found is not None or (c.who in installed and c.who not in pinned))
    ]


def with_install_extras(fix: Fix, facts: Facts) -> Fix:
    """`fix` with each pin carrying the extras `attn-doctor fix` installs it with (the recipe's,
    rules/releases/install.json, as far as the release provides them): a bare
    `pip install "transformer-engine==2.17.0"` moves only the meta package and leaves
    transformer-engine-torch behind, which TE's import refuses ("package version mismatch").
    Checked and printed with them, as the planner does."""
    if not any(not p.extras for p in fix.pins):
        return fix
    from doctor.fix.install import extras_for
    from doctor.releases.catalogue import cuda_major_after, load_release_catalogue

    rel = load_release_catalogue()
    installed = facts.packages or {}
    torch_pin = next((p.version for p in fix.pins if p.name == "torch"), None)
    cuda_major = cuda_major_after(torch_pin, facts.torch.version or installed.get("torch"), facts.torch.cuda)
    pins = tuple(p if p.extras else replace(p, extras=extras_for(rel, p.name, p.version, cuda_major)) for p in fix.pins)
    return fix if pins == fix.pins else replace(fix, pins=pins)


def fired(diagnosis: Diagnosis, severity: Severity) -> Set[str]:
    return {f.rule_id for f in diagnosis.findings if f.status == "fired" and f.severity == severity}


def recheck(
    cat: Catalogue,
    facts: Facts,
    workload: Workload,
    fix: Fix,
    targets: Tuple[str, ...],
    before: Optional[Diagnosis] = None,
) -> Recheck:
    """Apply `fix` and evaluate every rule again; `targets` are the rules it should clear."""
    before = before or diagnose(cat, facts, workload)
    f2, w2 = apply_fix(facts, workload, fix)
    after = diagnose(cat, f2, w2)
    return replace(compare(before, after, targets), uninstallable=uninstallable(facts, fix) + gpu_refused(facts, fix, after),
                   moves=moved_text(facts, fix), no_backend=no_backend(fix, after))


# the selected backends that call flash-attn 2's own kernels (transformers' flash_attention_2,
# TE's FlashAttention family) once the fix is applied
_CALLS_FLASH_ATTN = {"transformers": "transformers.flash_attention_2", "transformer-engine": "te.flash"}


def _runs_fa2(after: Diagnosis, backend: str) -> bool:
    """TE's FlashAttention family runs flash-attn 2 only where FA3 and FA4 are out."""
    status = next((b for b in after.backends if b.id == backend), None)
    if status is None or not status.members:
        return True
    avail = {m.id: m.available for m in status.members}
    return bool(avail.get("te.fa2")) and not avail.get("te.fa3") and not avail.get("te.fa4")


def gpu_refused(facts: Facts, fix: Fix, after: Diagnosis) -> Tuple[str, ...]:
    """A flash-attn pin whose own run-time arch check (or, on ROCm, whose build) refuses one of this host's GPUs, where
    what runs after the fix calls flash-attn's kernels (doctor.releases.wheels.flash_attn_refuses_gpu):
    such a pin clears a version check and fails at the first step instead (flash-attn 2.6.3 on a
    Blackwell card). Where nothing calls flash-attn (TE picks its unfused backend on a Turing
    card) the pin only satisfies a version check and is not counted."""
    if not any(p.name == "flash-attn" for p in fix.pins):
        return ()
    sel = dict(after.selections)
    if not any(sel.get(fw) == backend and _runs_fa2(after, backend) for fw, backend in _CALLS_FLASH_ATTN.items()):
        return ()
    from doctor.releases.wheels import flash_attn_refuses_gpu

    why = flash_attn_refuses_gpu(facts, {p.name: p.version for p in fix.pins})
    return (why,) if why else ()


# the backends an attn_implementation switch hands attention to (backend ids by prefix)
_IMPL_BACKENDS = {
    "sdpa": ("sdpa.",),
    "flash_attention_2": ("flash_attn.fa2",),
    "flash_attention_3": ("flash_attn.fa3",),
    "flash_attention_4": ("flash_attn.fa4",),
}


def no_backend(fix: Fix, after: Diagnosis) -> Tuple[str, ...]:
    """A fix that switches attn_implementation clears the rule it answers by moving attention
    elsewhere; it helps only if some backend of the library it moves to can run the workload
    after the fix (torch < 2.0 has no public SDPA, a Turing GPU no FlashAttention-2). Known-unavailable
    backends only: an undecided one is not held against the fix."""
    impl = (fix.workload or {}).get("attn_implementation")
    prefixes = _IMPL_BACKENDS.get(impl) if isinstance(impl, str) else None
    if not prefixes:
        return ()
    statuses = [b for b in after.backends if b.id.startswith(prefixes)]
    if not statuses or any(b.available is not False for b in statuses):
        return ()
    return (f"no {impl} backend can run here after it ({statuses[0].id}: {statuses[0].reasons[0] if statuses[0].reasons else 'unavailable'})",)


def compare(before: Diagnosis, after: Diagnosis, targets: Tuple[str, ...]) -> Recheck:
    """The verdict on a change, from the diagnoses before and after it."""
    # "cleared" means evaluated and false: a fix that only makes the rule undecidable is no fix
    cleared = tuple(t for t in targets if after.result(t).status == "passed")
    still = tuple(t for t in targets if t not in cleared)
    new_errors = tuple(sorted(fired(after, Severity.ERROR) - fired(before, Severity.ERROR) - set(targets)))
    new_warnings = tuple(sorted(fired(after, Severity.WARNING) - fired(before, Severity.WARNING) - set(targets)))
    return Recheck(cleared, still, new_errors, new_warnings, after)


def verified_fixes(cat: Catalogue, facts: Facts, workload: Workload, diagnosis: Diagnosis) -> Tuple[Finding, ...]:
    """Findings with only the fixes that, applied alone, are verified (see the module doc);
    advice the doctor cannot apply (a code change) is kept, unverified. Verified fixes come
    first, in the rule's order."""
    out: List[Finding] = []
    for finding in diagnosis.findings:
        if finding.status != "fired" or not finding.fixes:
            out.append(finding)
            continue
        kept: List[Fix] = []
        advice: List[Fix] = []
        for fix in finding.fixes:
            if not fix.checkable:
                advice.append(fix)
                continue
            fix = with_install_extras(with_torch_companions(fix, facts.packages or {}), facts)
            result = recheck(cat, facts, workload, fix, (finding.rule_id,), before=diagnosis)
            if result.verified:
                kept.append(replace(fix, verified=True, brings_up=result.new_warnings, moves=result.moves))
        out.append(replace(finding, fixes=tuple(kept + advice)))
    return tuple(out)


@dataclass(frozen=True)
class CaseRecheck:
    """A fix a rule offers in one of its own firing test cases that does not re-check clean."""

    rule_id: str
    index: int  # the fires case
    position: int  # the fix, as `offers:` numbers it
    verdict: str  # "still fires" | "also triggers RULE,..."

    @property
    def key(self) -> str:
        return f"{self.rule_id} fires[{self.index}] fix {self.position}"


def dropped_fixes(cat: Catalogue, facts: Facts, workload: Workload, rule_id: str) -> List[Tuple[int, str]]:
    """The checkable fixes rule `rule_id` offers for these inputs that `check` would drop, each
    applied alone: (the fix's position as `offers:` numbers it, why). Why is what the fix cannot
    do (does not install, leaves no backend), "also triggers RULE,..." or "still fires"."""
    before = diagnose(cat, facts, workload)
    finding = next((f for f in before.findings if f.rule_id == rule_id and f.status == "fired"), None)
    out: List[Tuple[int, str]] = []
    for fix in finding.fixes if finding else ():
        if not fix.checkable:
            continue
        r = recheck(cat, facts, workload, fix, (rule_id,), before)
        if r.uninstallable or r.no_backend:
            out.append((fix.position, "; ".join(r.uninstallable + r.no_backend)))
        elif r.new_errors:
            out.append((fix.position, "also triggers " + ",".join(r.new_errors)))
        elif r.diagnosis.result(rule_id).status == "fired":
            out.append((fix.position, "still fires"))
    return out


def case_rechecks(cat: Catalogue, only: Optional[Callable[[str], bool]] = None) -> List[CaseRecheck]:
    """Every checkable fix offered in every rule's own firing cases, applied alone: those that
    leave the rule firing or fire a new error (the fix moves the failure). `check` drops such a
    fix for such a user; the rule should not offer it there (a fix `when:`) or the case should
    say what that user has that makes it work."""
    from doctor.rules.cases import case_inputs, iter_rule_cases

    out: List[CaseRecheck] = []
    for rule, kind, i, case in iter_rule_cases(cat, (lambda r: only(r.id)) if only else None):
        if kind != "fires":
            continue
        facts, workload = case_inputs(case)
        for position, why in dropped_fixes(cat, facts, workload, rule.id):
            out.append(CaseRecheck(rule.id, i, position, why))
    return out
