"""Heterogeneity: facts that differ between the ranks (or nodes) of one job, as findings.

Input is one snapshot document (docs/snapshot.md) per rank, labelled: the rank number for
`check --distributed`, the file name for `check --env a.json --env b.json`. Each compared fact
is a row of `FACTS` (or one of the per-name families: packages, imports, environment
variables); a fact with two or more known values becomes one finding that names the ranks and
hosts on each side, the majority value first, with the fix that aligns the odd ones. A fact
known on some ranks and unknown on others is reported as not comparable (a warning), never
silently equal.

These are comparisons across snapshots, which the single-snapshot rule language under rules/
cannot express; the table below is the data, `analyze` the only logic. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import Finding, Fix, Pin, Severity
from doctor.versions import canonical_name, is_version

# One rank's snapshot: (label, host, snapshot document). host None: read it from the snapshot.
Snapshot = Tuple[str, Optional[str], Mapping[str, Any]]

AREA = "cluster"
UNSET = "unset"
NOT_INSTALLED = "not installed"

SRC_DRIVER = "https://docs.nvidia.com/deploy/cuda-compatibility/"
SRC_TORCH = "https://docs.pytorch.org/docs/stable/distributed.html"
SRC_CUDNN = "https://docs.nvidia.com/deeplearning/cudnn/backend/latest/reference/support-matrix.html"
SRC_FLASH = "https://github.com/Dao-AILab/flash-attention"
SRC_TE = "https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/attention/attention.html"
SRC_NCCL = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
SRC_NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"

# Variables that legitimately differ per rank (device binding, per-rank files): never compared.
PER_RANK_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "TORCHELASTIC_ERROR_FILE",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_USE_AGENT_STORE",
    }
)

FLASH_ATTN_DISTS = ("flash-attn", "flash-attn-3")
TE_DISTS = ("transformer-engine", "transformer-engine-torch", "transformer-engine-cu12", "transformer-engine-cu13")
NCCL_DISTS = ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13")
ATTENTION_IMPORTS = (
    "flash_attn",
    "flash_attn_2_cuda",
    "flash_attn_interface",
    "flash_attn.cute",
    "transformer_engine",
    "transformer_engine.pytorch",
    "xformers",
)


# --------------------------------------------------------------------------- reading facts


def _path(doc: Mapping[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _unknown(doc: Mapping[str, Any], *keys: str) -> bool:
    unknown = doc.get("unknown")
    return isinstance(unknown, Mapping) and any(k in unknown for k in keys)


def _plain(dotted: str) -> Callable[[Mapping[str, Any]], Optional[str]]:
    def get(doc: Mapping[str, Any]) -> Optional[str]:
        if _unknown(doc, dotted):
            return None
        value = _path(doc, dotted)
        return None if value is None else str(value)

    return get


def _torch_version(doc: Mapping[str, Any]) -> Optional[str]:
    value = _path(doc, "torch.version")
    if value is None and isinstance(doc.get("packages"), Mapping):
        value = doc["packages"].get("torch", NOT_INSTALLED)
    return None if value is None else str(value)


def _torch_cuda(doc: Mapping[str, Any]) -> Optional[str]:
    if _unknown(doc, "torch.cuda") or _path(doc, "torch.version") is None:
        return None
    value = _path(doc, "torch.cuda")
    return "none (CPU or ROCm build)" if value is None else str(value)


def _cudnn(doc: Mapping[str, Any]) -> Optional[str]:
    for key in ("cudnn.loaded", "torch.cudnn_version", "cudnn.version"):
        value = _path(doc, key)
        if value is not None and not _unknown(doc, key):
            return str(value)
    return None


def _dists(names: Sequence[str]) -> Callable[[Mapping[str, Any]], Optional[str]]:
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


def _driver_severity(values: Sequence[str]) -> str:
    majors = {v.split(".", 1)[0] for v in values}
    return "error" if len(majors) > 1 else "warning"


@dataclass(frozen=True)
class FactSpec:
    """One compared fact: how to read it and what it means when ranks disagree."""

    rule_id: str
    what: str  # "NVIDIA driver"
    get: Callable[[Mapping[str, Any]], Optional[str]]
    why: str  # what breaks when ranks differ
    fix: str  # what to do; {majority} and {odd} are filled in
    sources: Tuple[str, ...]
    severity: str = "error"
    severity_of: Optional[Callable[[Sequence[str]], str]] = None  # from the differing values
    pin: Optional[str] = None  # distribution to pin to the majority version
    pin_value: bool = False  # the value itself is "dist version": pin it
    cost: str = "rebuild or redeploy the image on the odd nodes"


FACTS: Tuple[FactSpec, ...] = (
    FactSpec(
        "CLUSTER-HETERO-DRIVER",
        "NVIDIA driver",
        _plain("cuda.driver_version"),
        "nodes on another driver branch support a different CUDA version and ship different "
        "NCCL/NVLink fixes: a job fails or hangs on those nodes only (a different major version "
        "is an error, a different minor version a warning)",
        "drain {odd} or move them to driver {majority}",
        (SRC_DRIVER,),
        severity_of=_driver_severity,
        cost="node maintenance (drain, driver update, reboot)",
    ),
    FactSpec(
        "CLUSTER-HETERO-TORCH",
        "PyTorch",
        _torch_version,
        "ranks on different PyTorch builds pick different attention kernels and may disagree on "
        "collective protocols: results differ between ranks and collectives can hang",
        "install torch {majority} on {odd}",
        (SRC_TORCH,),
        pin="torch",
    ),
    FactSpec(
        "CLUSTER-HETERO-TORCH-CUDA",
        "CUDA version torch was built for",
        _torch_cuda,
        "ranks run kernels compiled for different CUDA versions (and bundle different cuDNN / "
        "NCCL wheels): numerics and supported features differ by node",
        "install the torch wheel built for CUDA {majority} on {odd}",
        (SRC_TORCH,),
    ),
    FactSpec(
        "CLUSTER-HETERO-CUDA-RUNTIME",
        "CUDA runtime",
        _plain("cuda.runtime"),
        "ranks load different CUDA runtimes: kernels and libraries behave differently by node",
        "use the CUDA runtime {majority} on {odd}",
        (SRC_DRIVER,),
    ),
    FactSpec(
        "CLUSTER-HETERO-CUDA-AVAILABLE",
        "torch.cuda.is_available()",
        _plain("torch.cuda_available"),
        "some ranks cannot use their GPU: they fail at the first CUDA call or silently train on CPU",
        "fix the GPU/driver/container runtime on {odd} (torch.cuda.is_available() must be {majority})",
        (SRC_DRIVER,),
        cost="node maintenance",
    ),
    FactSpec(
        "CLUSTER-HETERO-CUDNN",
        "loaded cuDNN",
        _cudnn,
        "cuDNN decides which fused attention kernels run (TransformerEngine FusedAttention, the "
        "SDPA cuDNN backend) and their numerics: ranks compute different results or fail on "
        "some nodes only",
        "make {odd} load cuDNN {majority} (same nvidia-cudnn wheel, no system libcudnn ahead "
        "of it on LD_LIBRARY_PATH)",
        (SRC_CUDNN,),
    ),
    FactSpec(
        "CLUSTER-HETERO-NCCL",
        "NCCL",
        _dists(NCCL_DISTS),
        "every rank of a communicator must run the same NCCL: mixed versions can hang at "
        "communicator creation or corrupt collectives",
        "install {majority} on {odd}",
        (SRC_NCCL,),
        pin_value=True,
    ),
    FactSpec(
        "CLUSTER-HETERO-FLASH-ATTN",
        "flash-attn",
        _dists(FLASH_ATTN_DISTS),
        "ranks run different flash-attention kernels: supported head dims, softcap, windows and "
        "numerics differ, and TransformerEngine may pick a different backend on each side",
        "install {majority} on {odd}",
        (SRC_FLASH,),
        pin_value=True,
    ),
    FactSpec(
        "CLUSTER-HETERO-TE",
        "TransformerEngine",
        _dists(TE_DISTS),
        "TransformerEngine's backend selection and context-parallel code differ between versions: "
        "ranks run different attention paths and CP exchanges between them can fail or deadlock",
        "install {majority} on {odd}",
        (SRC_TE,),
        pin_value=True,
    ),
    FactSpec(
        "CLUSTER-HETERO-GPU",
        "GPU model",
        _gpus,
        "frameworks choose attention backends per GPU (FlashAttention-3 and cuDNN paths depend "
        "on the SM), so context-parallel peers run different kernels; the slowest node sets the "
        "pace",
        "schedule the job on nodes with {majority} only (exclude {odd})",
        (SRC_TE,),
        cost="fewer eligible nodes",
    ),
    FactSpec(
        "CLUSTER-HETERO-PYTHON",
        "Python",
        _plain("python.version"),
        "ranks run different Python builds: usually a sign of different images or environments",
        "use Python {majority} on {odd}",
        (SRC_TORCH,),
        severity=Severity.WARNING,
    ),
)

COVERED_DISTS = frozenset({"torch", *FLASH_ATTN_DISTS, *TE_DISTS, *NCCL_DISTS})

ENV_FAMILIES: Tuple[Tuple[str, str, str, Tuple[str, ...]], ...] = (
    (
        "NVTE_",
        "CLUSTER-HETERO-ENV-NVTE",
        "NVTE_* settings choose TransformerEngine's attention backend: ranks run different "
        "kernels (numerics, memory) and context-parallel exchanges between them can fail",
        (SRC_TE,),
    ),
    (
        "NCCL_",
        "CLUSTER-HETERO-ENV-NCCL",
        "NCCL_* settings change transports, protocols and algorithms: ranks that disagree can "
        "hang or slow every collective down",
        (SRC_NCCL_ENV,),
    ),
    (
        "",
        "CLUSTER-HETERO-ENV",
        "a setting that changes how the attention stack loads or runs differs between ranks",
        (SRC_TORCH,),
    ),
)


# --------------------------------------------------------------------------- formatting


def _ranges(labels: Sequence[str]) -> str:
    """"0,1,2,3,6" -> "0-3,6"; non-numeric labels are listed as they are."""
    if not all(label.isdigit() for label in labels):
        return ", ".join(labels)
    nums = sorted({int(x) for x in labels})
    parts: List[str] = []
    start = prev = nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def ranks_text(labels: Sequence[str], hosts: Sequence[str]) -> str:
    """"ranks 0-3 (node01, node02)": labels compressed, hosts listed (at most four)."""
    numeric = all(label.isdigit() for label in labels)
    noun = ("rank" if numeric else "snapshot") + ("s" if len(labels) > 1 else "")
    distinct = list(dict.fromkeys(h for h in hosts if h))
    shown = ", ".join(distinct[:4]) + (f" +{len(distinct) - 4} more" if len(distinct) > 4 else "")
    return f"{noun} {_ranges(labels)}" + (f" ({shown})" if shown else "")


@dataclass(frozen=True)
class _Side:
    value: str
    labels: Tuple[str, ...]
    hosts: Tuple[str, ...]

    def who(self) -> str:
        return ranks_text(self.labels, self.hosts)


def _sides(rows: Sequence[Tuple[str, str, Optional[str]]]) -> Tuple[List[_Side], Optional[_Side]]:
    """Group (label, host, value) by value: known sides, majority first; then the unknown side."""
    groups: Dict[Optional[str], Tuple[List[str], List[str]]] = {}
    for label, host, value in rows:
        labels, hosts = groups.setdefault(value, ([], []))
        labels.append(label)
        hosts.append(host)
    order = {v: i for i, v in enumerate(dict.fromkeys(v for _, _, v in rows))}
    known = [
        _Side(v, tuple(ls), tuple(hs)) for v, (ls, hs) in groups.items() if v is not None
    ]
    known.sort(key=lambda s: (-len(s.labels), order[s.value]))
    unknown = groups.get(None)
    return known, (_Side("unknown", tuple(unknown[0]), tuple(unknown[1])) if unknown else None)


def _describe(sides: Sequence[_Side]) -> str:
    return "; ".join(f"{s.value} on {s.who()}" for s in sides)


def _odd(sides: Sequence[_Side]) -> str:
    labels = [label for s in sides[1:] for label in s.labels]
    hosts = [h for s in sides[1:] for h in s.hosts]
    return ranks_text(labels, hosts)


def _evidence(sides: Sequence[_Side], unknown: Optional[_Side]) -> Tuple[str, ...]:
    rows = [f"{s.value}: {s.who()}" for s in sides]
    if unknown is not None:
        rows.append(f"unknown: {unknown.who()}")
    return tuple(rows)


def _finding(
    rule_id: str,
    severity: str,
    what: str,
    why: str,
    sides: Sequence[_Side],
    unknown: Optional[_Side],
    fix: Fix,
    sources: Tuple[str, ...],
) -> Finding:
    tail = f" (not known on {unknown.who()})" if unknown is not None else ""
    return Finding(
        rule_id=rule_id,
        severity=Severity(severity),
        title=f"{what} differs between ranks",
        message=f"{what} differs between ranks: {_describe(sides)}{tail}. Why it matters: {why}.",
        status="fired",
        fixes=(fix,),
        sources=sources,
        area=AREA,
        evidence=_evidence(sides, unknown),
    )


# --------------------------------------------------------------------------- analysis


def _compare(
    snapshots: Sequence[Tuple[str, str, Mapping[str, Any]]],
    get: Callable[[Mapping[str, Any]], Optional[str]],
) -> Tuple[List[_Side], Optional[_Side]]:
    return _sides([(label, host, get(doc)) for label, host, doc in snapshots])


def _version_of(value: str) -> Optional[Pin]:
    """"flash-attn 2.6.3" -> Pin("flash-attn", "2.6.3") (one distribution), else None."""
    if value == NOT_INSTALLED or "," in value:
        return None
    name, _, version = value.partition(" ")
    return Pin(canonical_name(name), version) if version and is_version(version) else None


def _fact_findings(
    snaps: Sequence[Tuple[str, str, Mapping[str, Any]]],
    not_comparable: List[Tuple[str, List[_Side], _Side]],
) -> List[Finding]:
    out: List[Finding] = []
    for spec in FACTS:
        sides, unknown = _compare(snaps, spec.get)
        if len(sides) < 2:
            if len(sides) == 1 and unknown is not None:
                not_comparable.append((spec.what, sides, unknown))
            continue
        severity = spec.severity_of([s.value for s in sides]) if spec.severity_of else spec.severity
        majority, odd = sides[0].value, _odd(sides)
        pins: Tuple[Pin, ...] = ()
        if spec.pin and majority != NOT_INSTALLED and is_version(majority):
            pins = (Pin(canonical_name(spec.pin), majority),)
        elif spec.pin_value and (whole := _version_of(majority)) is not None:
            pins = (whole,)
        fix = Fix(
            description=spec.fix.format(majority=majority, odd=odd),
            pins=pins,
            cost=spec.cost,
        )
        out.append(_finding(spec.rule_id, severity, spec.what, spec.why, sides, unknown, fix, spec.sources))
    return out


def _package_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    names = sorted(
        {
            n
            for _, _, doc in snaps
            if isinstance(doc.get("packages"), Mapping)
            for n in doc["packages"]
            if n not in COVERED_DISTS
        }
    )
    differing: List[Tuple[str, List[_Side], Optional[_Side]]] = []
    for name in names:

        def get(doc: Mapping[str, Any], name: str = name) -> Optional[str]:
            packages = doc.get("packages")
            if not isinstance(packages, Mapping):
                return None
            return str(packages[name]) if name in packages else NOT_INSTALLED

        sides, unknown = _compare(snaps, get)
        if len(sides) >= 2:
            differing.append((name, sides, unknown))
    if not differing:
        return []
    lines = [f"{name}: {_describe(sides)}" for name, sides, _ in differing]
    pins = tuple(
        Pin(canonical_name(name), sides[0].value)
        for name, sides, _ in differing
        if sides[0].value != NOT_INSTALLED and is_version(sides[0].value)
    )
    return [
        Finding(
            rule_id="CLUSTER-HETERO-PACKAGES",
            severity=Severity.WARNING,
            title=f"{len(differing)} other Python package(s) differ between ranks",
            message="Installed packages differ between ranks (the images are not the same): "
            + " | ".join(lines)
            + ".",
            status="fired",
            fixes=(
                Fix(
                    description="Build one image (or lock file) and run it on every node",
                    pins=pins,
                    cost="rebuild or redeploy the image on the odd nodes",
                ),
            ),
            sources=(SRC_TORCH,),
            area=AREA,
            evidence=tuple(lines),
        )
    ]


def _import_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    out: List[Finding] = []
    modules = list(ATTENTION_IMPORTS)
    for _, _, doc in snaps:
        imports = doc.get("imports")
        if isinstance(imports, Mapping):
            modules.extend(m for m in imports if m not in modules)

    for module in modules:

        def get(doc: Mapping[str, Any], module: str = module) -> Optional[str]:
            st = _path(doc, "imports")
            if not isinstance(st, Mapping) or not isinstance(st.get(module), Mapping):
                return None
            entry = st[module]
            status = str(entry.get("status", "error"))
            if status == "error":
                why = entry.get("cause") or entry.get("error")
                return f"error ({why})" if why else "error"
            return status

        sides, unknown = _compare(snaps, get)
        if len(sides) < 2:
            continue
        fix = Fix(
            description=f"make `import {module}` behave the same on {_odd(sides)} as on "
            f"{sides[0].who()} (same wheels, same libraries on LD_LIBRARY_PATH)",
            cost="rebuild or redeploy the image on the odd nodes",
        )
        out.append(
            _finding(
                "CLUSTER-HETERO-IMPORT",
                "error",
                f"`import {module}`",
                "ranks where the import fails fall back to another attention backend (or crash) "
                "while the others use it: kernels and numerics differ across the job",
                sides,
                unknown,
                fix,
                (SRC_FLASH, SRC_TE),
            )
        )
    return out


def _env_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    names = sorted(
        {
            n
            for _, _, doc in snaps
            if isinstance(doc.get("env"), Mapping)
            for n in doc["env"]
            if n not in PER_RANK_ENV
        }
    )
    out: List[Finding] = []
    for name in names:

        def get(doc: Mapping[str, Any], name: str = name) -> Optional[str]:
            env = doc.get("env")
            if not isinstance(env, Mapping):
                return None
            return repr(str(env[name])) if name in env else UNSET

        sides, unknown = _compare(snaps, get)
        if len(sides) < 2:
            continue
        prefix, rule_id, why, sources = next(f for f in ENV_FAMILIES if name.startswith(f[0]))
        majority = sides[0].value
        if majority == UNSET:
            fix = Fix(description=f"unset {name} on {_odd(sides)}", cost="none: a launcher/env change")
        else:
            value = majority[1:-1]
            fix = Fix(
                description=f"set {name}={value} on every rank (in the job script, before the launcher)",
                env={name: value},
                cost="none: a launcher/env change",
            )
        out.append(_finding(rule_id, "warning", name, why, sides, unknown, fix, sources))
    return out


def _not_comparable_finding(items: Sequence[Tuple[str, List[_Side], _Side]]) -> Finding:
    lines = [
        f"{what}: {sides[0].value} on {sides[0].who()}, not known on {unknown.who()}"
        for what, sides, unknown in items
    ]
    return Finding(
        rule_id="CLUSTER-HETERO-UNKNOWN",
        severity=Severity.WARNING,
        title="Some facts could not be compared across ranks",
        message="These facts are known on some ranks and could not be probed on others, so "
        "they were not compared (a node where NVML or the probe fails is often the odd one): "
        + " | ".join(lines)
        + ".",
        status="not_evaluated",
        missing=tuple(what for what, _, _ in items),
        sources=(SRC_DRIVER,),
        area=AREA,
        evidence=tuple(lines),
    )


def analyze(snapshots: Sequence[Snapshot]) -> Tuple[Finding, ...]:
    """Every fact that differs between the given snapshots, as findings (errors first).

    `snapshots` is [(label, host, snapshot document)]; host None reads the snapshot's `host`.
    Fewer than two snapshots cannot differ: the result is empty.
    """
    snaps = [
        (str(label), str(host or doc.get("host") or ""), doc) for label, host, doc in snapshots
    ]
    if len(snaps) < 2:
        return ()
    not_comparable: List[Tuple[str, List[_Side], _Side]] = []
    findings = _fact_findings(snaps, not_comparable)
    findings += _import_findings(snaps)
    findings += _package_findings(snaps)
    findings += _env_findings(snaps)
    if not_comparable:
        findings.append(_not_comparable_finding(not_comparable))
    findings.sort(key=lambda f: f.severity.rank)
    return tuple(findings)
