"""The frozen values that cross pipeline stages.

probe  -> Facts (what is installed and loaded, from a live probe or a snapshot file)
input  -> Workload (what the user is about to run)
rules  -> BackendStatus, Finding (with Fix)
verify -> CaseResult
report -> Report (everything above, ready for a formatter)

`Facts` is a typed view of the snapshot JSON document (docs/snapshot.md). A section that is
absent from a snapshot is `None` here and every fact under it is unknown; the reason is kept
in `Facts.unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping, Optional, Tuple

SCHEMA_VERSION = 1



def frozen_map(d: Optional[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """Read-only copy of a mapping (None stays None: the whole section is unknown)."""
    return None if d is None else MappingProxyType(dict(d))


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class TorchInfo:
    version: Optional[str] = None
    cuda: Optional[str] = None  # CUDA the wheel was built for; None on CPU/ROCm builds
    hip: Optional[str] = None
    git_version: Optional[str] = None
    cxx11_abi: Optional[bool] = None
    cuda_available: Optional[bool] = None
    device_count: Optional[int] = None
    arch_list: Optional[Tuple[str, ...]] = None
    cudnn_version: Optional[str] = None  # torch.backends.cudnn.version(), as x.y.z


@dataclass(frozen=True)
class CudaInfo:
    driver_version: Optional[str] = None  # "550.54.15"
    driver_cuda: Optional[str] = None  # highest CUDA the driver supports: "12.4"
    runtime: Optional[str] = None  # CUDA runtime found (wheel or system), "12.4.127"


@dataclass(frozen=True)
class CudnnInfo:
    version: Optional[str] = None  # effective: loaded if known, else best static estimate
    loaded: Optional[str] = None  # what torch actually loaded (child process)
    loaded_path: Optional[str] = None
    installed: Optional[str] = None  # newest nvidia-cudnn-cuXX wheel or system libcudnn found
    bundled: Optional[str] = None  # what the installed torch wheel pins (Requires-Dist)
    mismatch: Optional[str] = None  # installed vs loaded vs bundled disagree: how


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: str  # "8.0"
    memory_mib: Optional[int] = None

    @property
    def sm(self) -> int:
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)


@dataclass(frozen=True)
class ImportStatus:
    status: str  # ok | error | missing | timeout
    error: Optional[str] = None
    cause: Optional[str] = None  # decoded cause of an `undefined symbol`, ABI mismatch, ...
    fix: Optional[str] = None  # what to do about it (the matching wheel, a rebuild)


@dataclass(frozen=True)
class PythonInfo:
    version: Optional[str] = None
    implementation: Optional[str] = None


@dataclass(frozen=True)
class Facts:
    packages: Optional[Mapping[str, str]] = None  # PEP 503 name -> version
    torch: TorchInfo = field(default_factory=TorchInfo)
    cuda: CudaInfo = field(default_factory=CudaInfo)
    cudnn: CudnnInfo = field(default_factory=CudnnInfo)
    gpus: Optional[Tuple[GpuInfo, ...]] = None
    env: Optional[Mapping[str, str]] = None
    imports: Mapping[str, ImportStatus] = field(default_factory=dict)
    python: PythonInfo = field(default_factory=PythonInfo)
    host: Optional[str] = None
    unknown: Mapping[str, str] = field(default_factory=dict)  # fact path -> why it could not be probed
    source: str = "probe"  # "probe" or the snapshot file it came from

    def with_changes(self, **changes: Any) -> "Facts":
        return replace(self, **changes)


def _section(cls: type, data: Any) -> Any:
    if not isinstance(data, Mapping):
        return cls()
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if "arch_list" in kwargs and kwargs["arch_list"] is not None:
        kwargs["arch_list"] = tuple(kwargs["arch_list"])
    return cls(**kwargs)


def _cuda_from_label(version: str) -> Optional[str]:
    """'2.4.1+cu121' -> '12.1', '2.9.0+cu130' -> '13.0'; None when the label does not say."""
    import re

    m = re.search(r"\+cu(\d{2,3})\b", version)
    return f"{m.group(1)[:-1]}.{m.group(1)[-1]}" if m else None


def facts_from_snapshot(doc: Mapping[str, Any], source: str = "probe") -> Facts:
    """Build Facts from a snapshot document (already checked by doctor.snapshot)."""
    unknown = dict(doc.get("unknown") or {})
    for key in ("packages", "gpus", "env"):
        if key not in doc:
            unknown.setdefault(key, "not in snapshot")
    gpus = None
    if isinstance(doc.get("gpus"), list):
        gpus = tuple(
            GpuInfo(
                index=int(g.get("index", i)),
                name=str(g.get("name", "unknown GPU")),
                compute_capability=str(g.get("compute_capability")),
                memory_mib=g.get("memory_mib"),
            )
            for i, g in enumerate(doc["gpus"])
            if g.get("compute_capability") is not None
        )
    imports = {
        name: ImportStatus(
            status=str(st.get("status", "error")), error=st.get("error"), cause=st.get("cause"), fix=st.get("fix")
        )
        for name, st in (doc.get("imports") or {}).items()
        if isinstance(st, Mapping)
    }
    packages = doc.get("packages")
    torch = _section(TorchInfo, doc.get("torch"))
    if "torch" not in doc:
        # No torch section: the build facts are unknown, except what the version label says.
        unknown.setdefault("torch", "no torch section in the snapshot")
        if isinstance(packages, Mapping) and "torch" in packages:
            version = str(packages["torch"])
            torch = replace(torch, version=version, cuda=_cuda_from_label(version))
            if torch.cuda is not None or version.endswith("+cpu"):
                unknown.pop("torch", None)  # the label says which build it is
    cudnn = _section(CudnnInfo, doc.get("cudnn"))
    if cudnn.version is None:
        cudnn = replace(cudnn, version=cudnn.loaded or torch.cudnn_version or cudnn.installed)
    env = doc.get("env")
    return Facts(
        packages=frozen_map({str(k): str(v) for k, v in packages.items()})
        if isinstance(packages, Mapping)
        else None,
        torch=torch,
        cuda=_section(CudaInfo, doc.get("cuda")),
        cudnn=cudnn,
        gpus=gpus,
        env=frozen_map({str(k): str(v) for k, v in env.items()}) if isinstance(env, Mapping) else None,
        imports=MappingProxyType(imports),
        python=_section(PythonInfo, doc.get("python")),
        host=doc.get("host"),
        unknown=MappingProxyType(unknown),
        source=source,
    )


# --------------------------------------------------------------------------- workload

MASKS = (
    "no_mask",
    "causal",
    "causal_bottom_right",
    "padding",
    "padding_causal",
    "padding_causal_bottom_right",
    "arbitrary",
)
DTYPES = ("fp16", "bf16", "fp32", "fp8")
QKV_FORMATS = ("bshd", "sbhd", "thd")
CP_COMM_TYPES = ("p2p", "a2a", "all_gather", "a2a+p2p")
ATTN_IMPLEMENTATIONS = (
    "eager",
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flex_attention",
)


@dataclass(frozen=True)
class ContextParallel:
    size: int = 1
    comm_type: str = "p2p"


@dataclass(frozen=True)
class Workload:
    """What the user is about to run. Every field is known: unspecified ones come from the
    default profile, and `defaulted` names them so the report can say so."""

    dtype: str = "bf16"
    head_dim_qk: int = 128
    head_dim_v: int = 128
    num_heads: int = 32
    num_kv_heads: int = 8
    seq_len_q: int = 4096
    seq_len_kv: int = 4096
    batch_size: int = 1
    mask: str = "causal"
    window_size: Optional[Tuple[int, int]] = None
    softcap: float = 0.0
    alibi: bool = False
    dropout: float = 0.0
    qkv_format: str = "bshd"
    qkv_packed: bool = False
    varlen: bool = False
    training: bool = True
    deterministic: bool = False
    fp8: bool = False
    context_parallel: ContextParallel = field(default_factory=ContextParallel)
    attn_implementation: Optional[str] = None
    source: str = "default profile"
    defaulted: Tuple[str, ...] = ()

    # Derived facts, usable in rule conditions as workload.<name>.
    @property
    def mla(self) -> bool:
        return self.head_dim_qk != self.head_dim_v

    @property
    def gqa(self) -> bool:
        return self.num_kv_heads < self.num_heads

    @property
    def cross_attention(self) -> bool:
        return self.seq_len_q != self.seq_len_kv

    @property
    def head_dim_max(self) -> int:
        return max(self.head_dim_qk, self.head_dim_v)

    @property
    def cp_size(self) -> int:
        return self.context_parallel.size

    @property
    def cp_comm_type(self) -> Optional[str]:
        return self.context_parallel.comm_type if self.context_parallel.size > 1 else None

    @property
    def sliding_window(self) -> bool:
        return self.window_size is not None and tuple(self.window_size) != (-1, -1)

    @property
    def bottom_right(self) -> bool:
        return self.mask.endswith("bottom_right")

    @property
    def causal(self) -> bool:
        return "causal" in self.mask

    @property
    def padding(self) -> bool:
        return self.mask.startswith("padding")


WORKLOAD_DERIVED = (
    "mla",
    "gqa",
    "cross_attention",
    "head_dim_max",
    "cp_size",
    "cp_comm_type",
    "sliding_window",
    "bottom_right",
    "causal",
    "padding",
)

# --------------------------------------------------------------------------- rule results

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Fix:
    description: str
    pins: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    config: Tuple[str, ...] = ()
    cost: Optional[str] = None
    verified: Optional[bool] = None  # True: re-checking with it applied clears the finding


@dataclass(frozen=True)
class Finding:
    rule_id: str
    severity: str  # error | warning | info
    title: str
    message: str  # rendered for these facts and this workload
    status: str  # fired | not_evaluated ; after kernels: confirmed | refuted | not_run
    fixes: Tuple[Fix, ...] = ()
    sources: Tuple[str, ...] = ()
    missing: Tuple[str, ...] = ()  # facts that were unknown (status not_evaluated)
    area: str = "general"
    kernels: Tuple[str, ...] = ()  # kernel case ids that test this prediction
    evidence: Tuple[str, ...] = ()  # what the kernels saw


@dataclass(frozen=True)
class BackendStatus:
    id: str  # "te.fused"
    framework: str  # "transformer-engine"
    name: str  # "FusedAttention (cuDNN)"
    available: Optional[bool]  # None: could not decide (unknown facts)
    reasons: Tuple[str, ...] = ()  # why it is out (or why availability is unknown)
    selected: bool = False  # the one this framework would pick for the workload
    rule_ids: Tuple[str, ...] = ()
    evidence: Tuple[str, ...] = ()  # what kernel cases saw for this backend


@dataclass(frozen=True)
class CaseResult:
    """One kernel case as the worker reported it (see kernels/README.md)."""

    id: str
    backend: str
    status: str  # passed | failed | unsupported | crashed | timeout | skipped
    detail: str = ""
    max_rel_error: Optional[float] = None
    ms: Optional[float] = None
    tflops: Optional[float] = None


@dataclass(frozen=True)
class HostResult:
    """One snapshot of a fleet view (`check --env A --env B ...`), evaluated on its own."""

    label: str  # host name (or file stem), unique within the fleet
    source: str  # the snapshot file
    findings: Tuple[Tuple[str, str, str], ...] = ()  # (rule id, severity, status) of what it reported
    undecided: Tuple[str, ...] = ()  # frameworks whose backend choice is undecided on this host


@dataclass(frozen=True)
class Report:
    facts: Facts
    workload: Workload
    backends: Tuple[BackendStatus, ...]
    findings: Tuple[Finding, ...]
    kernels: Tuple[CaseResult, ...] = ()
    kernels_skipped: Optional[str] = None  # why the kernel stage did not run
    assumed: Tuple[str, ...] = ()  # --assume / --assume-env applied
    rule_results: Tuple[Tuple[str, str], ...] = ()  # (rule id, fired|passed|not_evaluated)
    kernel_summary: Tuple[Tuple[str, str], ...] = ()  # (label, value) lines from the kernel run
    hosts: Tuple[HostResult, ...] = ()  # fleet view: every snapshot's own result
