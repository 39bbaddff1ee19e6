"""What every check formatter shares: the per-area summary lines and the verdict counts.

Pure functions of a Report; formatters only decide how the lines look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from doctor.model import STAGE_BY_NAME, BackendStatus, Finding, Report, Workload

AREA_TITLES = {
    "gpu": "GPU and driver",
    "cuda": "CUDA and cuDNN",
    "torch-sdpa": "PyTorch SDPA",
    "flash-attn": "flash-attn",
    "transformer-engine": "TransformerEngine",
    "transformers": "transformers",
    "frameworks": "Training frameworks",
    "numerics": "Known numerical bugs",
    "cluster": "Cluster consistency",
    "kernels": "Kernel checks",
    "general": "Other",
}
AREA_ALIASES = {"driver": "gpu", "cudnn": "cuda", "torch": "cuda", "sdpa": "torch-sdpa", "xtuner": "frameworks"}
FRAMEWORK_AREAS = ("torch-sdpa", "flash-attn", "transformer-engine", "transformers")


def behind_note(f: Finding) -> str:
    """'' or one sentence: the errors at an earlier stage of the run that stop it before this
    finding can show (doctor.model.STAGES), so the user fixes those first."""
    if not f.behind:
        return ""
    when = STAGE_BY_NAME[f.stage].when if f.stage in STAGE_BY_NAME else "later"
    if len(f.behind) == 1:
        return f"Comes after {f.behind[0]}: the run stops there first; this shows {when} once that is fixed (check again then)."
    return f"Comes after {', '.join(f.behind)}: the run stops at those first; this shows {when} once they are fixed (check again then)."


@dataclass(frozen=True)
class AreaLine:
    area: str
    mark: str  # ok | warning | error | unknown
    title: str
    detail: str


def area_of(finding: Finding) -> str:
    return AREA_ALIASES.get(finding.area, finding.area)


def worst(findings: List[Finding]) -> str:
    marks = {f.severity if f.status not in ("not_evaluated", "refuted") else "unknown" for f in findings}
    for m in ("error", "warning"):
        if m in marks:
            return m
    return "unknown" if "unknown" in marks else "ok"


def _gpu_detail(report: Report) -> Tuple[str, bool]:
    f = report.facts
    if f.gpus is None:
        return f"GPUs not probed ({f.unknown.get('gpus', 'unknown')})", False
    if not f.gpus:
        return "no NVIDIA GPU found", True
    names: Dict[str, int] = {}
    for g in f.gpus:
        key = f"{g.name} (sm{g.sm})"
        names[key] = names.get(key, 0) + 1
    gpus = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
    drv = f.cuda.driver_version or "unknown"
    dc = f" (supports CUDA {f.cuda.driver_cuda})" if f.cuda.driver_cuda else ""
    return f"{gpus}; driver {drv}{dc}", True


def _cuda_detail(report: Report) -> str:
    f = report.facts
    t = f.torch
    parts = []
    if t.version:
        parts.append(f"torch {t.version}" + (f" (CUDA {t.cuda})" if t.cuda else " (CPU build)" if t.hip is None else f" (ROCm {t.hip})"))
    elif f.packages is not None:
        parts.append("torch not installed")
    c = f.cudnn
    if c.version:
        src = "loaded" if c.loaded else "installed" if c.installed else "bundled with torch" if c.bundled else "reported"
        parts.append(f"cuDNN {c.version} ({src})")
    if c.bundled and c.version and c.bundled.split(".")[:2] != c.version.split(".")[:2]:
        parts.append(f"torch bundles {c.bundled}")
    return ", ".join(parts) or "unknown"


# What the backend model could say about a framework: the mark it gives a clean area, and why.
_STATE_MARK = {"selected": "ok", "none": "warning", "undecided": "unknown", "not_covered": "unknown"}


def framework_detail(fw: str, report: Report) -> Optional[Tuple[str, str]]:
    """(state, detail) for a framework the backend model knows, None otherwise; state is one of
    _STATE_MARK's keys."""
    bs = [b for b in report.backends if b.framework == fw]
    if not bs:
        return None
    sel = next((b for b in bs if b.selected), None)
    if sel is not None:
        n = sum(1 for b in bs if b.available)
        return "selected", f"uses {sel.name} ({n}/{len(bs)} backends available)"
    if bs[0].not_covered:  # the whole framework is older than the catalogue covers
        return "not_covered", "not checked: " + bs[0].not_covered
    if any(b.available is None for b in bs):
        return "undecided", "backend choice undecided (unknown facts)"
    return "none", "no backend for this workload"  # an error only where a finding says it is in use


def area_lines(report: Report) -> List[AreaLine]:
    by_area: Dict[str, List[Finding]] = {}
    for f in report.findings:
        by_area.setdefault(area_of(f), []).append(f)
    lines: List[AreaLine] = []
    detail, known = _gpu_detail(report)
    fs = by_area.pop("gpu", [])
    lines.append(AreaLine("gpu", worst(fs) if (fs or known) else "unknown", AREA_TITLES["gpu"], detail))
    fs = by_area.pop("cuda", [])
    cuda_detail = _cuda_detail(report)
    cuda_mark = worst(fs)
    if cuda_mark == "ok" and (report.facts.torch.version is None or cuda_detail == "unknown"):
        cuda_mark = "unknown"  # nothing was checked here: no torch (or nothing known), no green mark
    lines.append(AreaLine("cuda", cuda_mark, AREA_TITLES["cuda"], cuda_detail))
    pkgs = report.facts.packages or {}
    for fw in FRAMEWORK_AREAS:
        fs = by_area.pop(fw, [])
        state = framework_detail(fw, report)
        if state is None and not fs:
            continue
        version = (report.facts.torch.version or pkgs.get("torch")) if fw == "torch-sdpa" else pkgs.get(fw)
        title = AREA_TITLES[fw] + (f" {version}" if version else "")
        mark = worst(fs)
        if state is not None and mark == "ok":
            mark = _STATE_MARK[state[0]]
        lines.append(AreaLine(fw, mark, title, state[1] if state else ""))
    kernel_findings = by_area.pop("kernels", [])
    for area in sorted(by_area):
        fs = by_area[area]
        n = len(fs)
        lines.append(AreaLine(area, worst(fs), AREA_TITLES.get(area, area), f"{n} finding{'s' * (n != 1)}"))
    if report.kernels:
        counts: Dict[str, int] = {}
        for c in report.kernels:
            counts[c.status] = counts.get(c.status, 0) + 1
        bad = counts.get("failed", 0) + counts.get("crashed", 0) + counts.get("timeout", 0)
        detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        mark = worst(kernel_findings) if kernel_findings else ("error" if bad else "ok")
        lines.append(AreaLine("kernels", mark, AREA_TITLES["kernels"], detail))
    elif report.kernels_skipped:
        lines.append(AreaLine("kernels", "unknown", AREA_TITLES["kernels"], f"not run: {report.kernels_skipped}"))
    pending = [f for f in report.findings if f.status == "not_evaluated"]
    undecided = [b for b in report.backends if b.available is None and not b.not_covered]
    if pending or undecided:
        parts = []
        if pending:
            parts.append(f"{len(pending)} finding rule(s)")
        if undecided:
            parts.append(f"{len(undecided)} backend(s)")
        detail = " and ".join(parts) + " need facts that are unknown (-v lists them)"
        lines.append(AreaLine("unknown", "unknown", "Could not check", detail))
    return lines


def describe_workload(w: Workload) -> str:
    hd = f"hd {w.head_dim_qk}" if not w.mla else f"hd {w.head_dim_qk}/{w.head_dim_v}"
    parts = [p for p in (w.framework, w.model_type) if p] + [w.dtype, hd, f"{w.num_heads}/{w.num_kv_heads} heads", w.mask, f"seq {w.seq_len_q}" + (f"/{w.seq_len_kv}" if w.cross_attention else "")]
    parts.append("training" if w.training else "inference")
    if w.cp_size > 1:
        impl = f" ({w.cp_impl})" if w.cp_impl else ""
        parts.append(f"CP {w.cp_size} {w.cp_comm_type}{impl}")
    if w.sliding_window:
        parts.append(f"window {list(w.window_size or ())}")
    if w.softcap:
        parts.append(f"softcap {w.softcap:g}")
    if w.softmax_type in ("off-by-one", "learnable"):
        parts.append(f"{w.softmax_type} softmax")
    if w.alibi:
        parts.append("alibi")
    if w.dropout:
        parts.append(f"dropout {w.dropout:g}")
    if w.fp8 and w.dtype != "fp8":
        parts.append("fp8")
    if w.deterministic:
        parts.append("deterministic")
    if w.qkv_format != "bshd":
        parts.append(w.qkv_format)
    if w.qkv_packed:
        parts.append("packed qkv")
    if w.packing != "padded":
        parts.append(w.packing)
    if w.attn_implementation:
        parts.append(w.attn_implementation)
    return ", ".join(parts)


def counts(report: Report) -> Dict[str, int]:
    out = {"error": 0, "warning": 0, "info": 0, "not_evaluated": 0, "refuted": 0}
    for f in report.findings:
        if f.status == "not_evaluated":
            out["not_evaluated"] += 1
        elif f.status == "refuted":
            out["refuted"] += 1
        else:
            out[f.severity] = out.get(f.severity, 0) + 1
    out["backends_undecided"] = sum(1 for b in report.backends if b.available is None)
    out["rules"] = len(report.rule_results)
    return out


def backends_by_framework(report: Report) -> Dict[str, List[BackendStatus]]:
    out: Dict[str, List[BackendStatus]] = {}
    for b in report.backends:
        out.setdefault(b.framework, []).append(b)
    return out
