"""Kernel verification: plan attention cases, run them in an isolated worker, collect results.

The cases themselves run in `kernels/worker.py` (shipped as doctor/_data/kernels), started
as a separate Python process: this module never imports torch. The worker streams JSON lines
back; a case that crashes the worker (segfault, abort, illegal memory access) or hangs past
its timeout is recorded as `crashed` / `timeout` with the tail of the worker's stderr, and a
fresh worker continues with the remaining cases.

Public API (docs/kernels.md):
    plan_cases(workload, installed, suite="default") -> list[CaseSpec]
    run_cases(cases, python=..., timeout_s=..., observer=..., env=...) -> KernelRun
    kernels_available(facts) -> (bool, reason)
    installed_backends(facts=None) -> set[str]
    python -m doctor.verify --out FILE.json [--workload FILE] [--suite default|full]
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from doctor.model import CaseResult, Facts, Workload

PROTOCOL = 1

SDPA_BACKENDS = ("sdpa.flash", "sdpa.efficient", "sdpa.cudnn", "sdpa.math")
FA_BACKENDS = ("flash_attn.fa2", "flash_attn.fa3", "flash_attn.fa4")
TE_BACKENDS = ("te.flash", "te.fused", "te.unfused")
BACKENDS = SDPA_BACKENDS + ("sdpa.flex",) + FA_BACKENDS + TE_BACKENDS + ("xformers.cutlass",)
STATUSES = ("passed", "failed", "unsupported", "crashed", "timeout", "skipped")

# Shape a case has unless its id says otherwise (see the id grammar in docs/kernels.md).
DEFAULT_BATCH = 2
DEFAULT_HEADS = 8
DEFAULT_SEQ = 256
JUDGE_SEQ_CAP = 1024  # correctness cases of a workload run at most this long; timing runs full
DEFAULT_TIMEOUT_S = 60.0
STARTUP_TIMEOUT_S = 180.0
FLEX_TIMEOUT_S = 300.0  # the first flex case pays for torch.compile


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class CaseSpec:
    """One attention call to run and judge. `id` follows the grammar in docs/kernels.md."""

    id: str
    backend: str
    dtype: str = "bf16"
    batch: int = DEFAULT_BATCH
    heads_q: int = DEFAULT_HEADS
    heads_kv: int = DEFAULT_HEADS
    seq_q: int = DEFAULT_SEQ
    seq_kv: int = DEFAULT_SEQ
    head_dim_qk: int = 128
    head_dim_v: int = 128
    mask: str = "causal"  # no_mask | causal (top-left) | causal_bottom_right
    window: Optional[Tuple[int, int]] = None  # (left, right), bottom-right aligned, -1 = inf
    softcap: float = 0.0
    dropout: float = 0.0
    layout: str = "bshd"  # bshd | strided-qkv | varlen | kvcache
    seqlens: Tuple[int, ...] = ()  # varlen only
    direction: str = "fwdbwd"  # fwd | fwdbwd
    bench: bool = False  # time it (ms, TFLOP/s)
    judge: bool = True  # compare against the float64 reference (False: finite check only)
    shape: Optional[str] = None  # workload-shape key: cases sharing it feed `fastest`
    purpose: str = ""
    timeout_s: Optional[float] = None
    seed: int = 0

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["window"] = list(self.window) if self.window is not None else None
        d["seqlens"] = list(self.seqlens)
        return d


# The grammar of case ids as a regular expression (docs/kernels.md explains each segment).
CASE_ID_PATTERN = (
    r"^(?P<backend>[a-z_]+\.[a-z0-9_]+)/(?P<dtype>fp16|bf16|fp32|fp8)"
    r"/hd(?P<hd_qk>\d+)(?:-(?P<hd_v>\d+))?"
    r"(?:/gqa(?P<gqa_q>\d+)-(?P<gqa_kv>\d+)|/h(?P<heads>\d+))?"
    r"(?:/s(?P<seq>\d+)|/sq(?P<seq_q>\d+)-skv(?P<seq_kv>\d+))?"
    r"(?:/b(?P<batch>\d+))?"
    r"/(?P<mask>no_mask|causal|causal_bottom_right)"
    r"(?:/window(?P<window>(?:\d+|inf)-(?:\d+|inf)))?"
    r"(?:/softcap(?P<softcap>[0-9.e+-]+))?"
    r"(?:/dropout(?P<dropout>[0-9.e+-]+))?"
    r"(?:/(?P<layout>strided-qkv|varlen|kvcache))?"
    r"(?P<bench>/bench)?"
    r"/(?P<direction>fwd|fwdbwd)$"
)


def _num(x: float) -> str:
    return f"{x:g}"


def case_id(backend: str, *, dtype: str, head_dim_qk: int, head_dim_v: int, heads_q: int,
            heads_kv: int, seq_q: int, seq_kv: int, batch: int, mask: str,
            window: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
            dropout: float = 0.0, layout: str = "bshd", bench: bool = False,
            direction: str = "fwdbwd") -> str:
    """The stable, readable id of a case (grammar in docs/kernels.md):

    backend/dtype/hdD[-Dv]/[gqaH-Hkv|hH]/[sS|sqS-skvS]/[bB]/mask/[windowL-R]/[softcapX]/
        [dropoutP]/[strided-qkv|varlen|kvcache]/[bench]/fwd|fwdbwd
    """
    seg = [backend, dtype, f"hd{head_dim_qk}" if head_dim_qk == head_dim_v
           else f"hd{head_dim_qk}-{head_dim_v}"]
    if heads_q != heads_kv:
        seg.append(f"gqa{heads_q}-{heads_kv}")
    elif heads_q != DEFAULT_HEADS:
        seg.append(f"h{heads_q}")
    if seq_q != seq_kv:
        seg.append(f"sq{seq_q}-skv{seq_kv}")
    elif seq_q != DEFAULT_SEQ:
        seg.append(f"s{seq_q}")
    if batch != DEFAULT_BATCH:
        seg.append(f"b{batch}")
    seg.append(mask)
    if window is not None:
        seg.append("window" + "-".join("inf" if w < 0 else str(w) for w in window))
    if softcap:
        seg.append(f"softcap{_num(softcap)}")
    if dropout:
        seg.append(f"dropout{_num(dropout)}")
    if layout != "bshd":
        seg.append(layout)
    if bench:
        seg.append("bench")
    seg.append(direction)
    return "/".join(seg)


def make_case(backend: str, *, purpose: str = "", shape: Optional[str] = None,
              judge: bool = True, timeout_s: Optional[float] = None, **kw: Any) -> CaseSpec:
    """A CaseSpec with its id derived from its fields (varlen gets fixed sequence lengths)."""
    spec = CaseSpec(id="", backend=backend, **kw)
    if spec.layout == "varlen" and not spec.seqlens:
        s = spec.seq_q
        lens = [s, max(1, 3 * s // 4 - 5), s // 2 + 1, max(1, s // 4 + 3)]
        spec = replace(spec, seqlens=tuple(lens[i % 4] for i in range(spec.batch)))
    if backend == "sdpa.flex" and timeout_s is None:
        timeout_s = FLEX_TIMEOUT_S
    cid = case_id(backend, dtype=spec.dtype, head_dim_qk=spec.head_dim_qk,
                  head_dim_v=spec.head_dim_v, heads_q=spec.heads_q, heads_kv=spec.heads_kv,
                  seq_q=spec.seq_q, seq_kv=spec.seq_kv, batch=spec.batch, mask=spec.mask,
                  window=spec.window, softcap=spec.softcap, dropout=spec.dropout,
                  layout=spec.layout, bench=spec.bench, direction=spec.direction)
    return replace(spec, id=cid, purpose=purpose, shape=shape, judge=judge, timeout_s=timeout_s)


def matches(case_id: str, patterns: Iterable[str]) -> bool:
    """Whether a case id matches any glob (fnmatch: `*` also spans `/`), as rules use them."""
    from fnmatch import fnmatchcase

    return any(fnmatchcase(case_id, p) for p in patterns)


def not_expressible(spec: CaseSpec) -> Optional[str]:
    """Why the backend's API cannot even state this case (such cases are not planned)."""
    b = spec.backend
    fa_like = b.startswith("flash_attn.")
    if spec.softcap and (b in SDPA_BACKENDS or b.startswith("te.") or b.startswith("xformers")):
        return "no softcap in this API"
    if fa_like and spec.mask == "causal" and spec.seq_q != spec.seq_kv:
        return "flash-attn causal is bottom-right aligned"
    if spec.dropout and (b in ("flash_attn.fa3", "flash_attn.fa4", "sdpa.flex")):
        return "no dropout in this API"
    if spec.layout == "kvcache" and b not in ("flash_attn.fa2", "flash_attn.fa3"):
        return "no KV-cache entry point"
    if spec.layout == "varlen" and (b == "sdpa.flex" or b.startswith("xformers")):
        return "varlen not covered for this API"
    if spec.layout == "varlen" and b in SDPA_BACKENDS and spec.window is not None:
        return "nested-tensor SDPA takes no mask"
    if spec.window is not None and b.startswith("xformers"):
        return "sliding window not covered for xformers"
    if spec.dtype == "fp8" and b != "flash_attn.fa3":
        return "fp8 covered for FA3 only"
    return None


def _add(plan: List[CaseSpec], seen: Set[str], spec: CaseSpec) -> None:
    if spec.id not in seen and not_expressible(spec) is None:
        seen.add(spec.id)
        plan.append(spec)


def _shape_key(spec: CaseSpec) -> str:
    """The id without its backend: the key under which backends are compared."""
    return spec.id.split("/", 1)[1].replace("/bench", "")


def plan_cases(workload: Optional[Workload], installed: Iterable[str], *,
               suite: str = "default") -> List[CaseSpec]:
    """The cases to run for these installed backend ids.

    No workload: the default matrix (head-dim sweep, static-rule confirmations, masks, GQA,
    MLA, dropout, varlen, the seed-004 strided GQA inputs, and timings at the default
    workload shape). With a workload: its own shape on every installed backend (judged at
    a capped length, timed at full length) plus the key regression cases. suite="full"
    adds flex_attention and the remaining feature cases to the default matrix.
    """
    inst = [b for b in BACKENDS if b in set(installed)]
    sdpa = [b for b in SDPA_BACKENDS if b in inst]
    others = [b for b in inst if b not in SDPA_BACKENDS and b != "sdpa.flex"]
    plan: List[CaseSpec] = []
    seen: Set[str] = set()
    add = lambda spec: _add(plan, seen, spec)  # noqa: E731

    if workload is None:
        for b in sdpa + others:
            for hd in (64, 128, 192, 256):
                add(make_case(b, head_dim_qk=hd, head_dim_v=hd, purpose="head-dim sweep"))
            add(make_case(b, dtype="fp16", purpose="fp16"))
        for b in sdpa:
            add(make_case(b, head_dim_qk=320, head_dim_v=320, mask="no_mask", direction="fwd",
                          purpose="static rule: flash and cuDNN SDPA refuse head_dim > 256"))
        _features(add, sdpa + others, flex="sdpa.flex" in inst and suite == "full")
        _bench(add, Workload(), inst if suite == "full" else [b for b in inst if b != "sdpa.flex"])
    else:
        _workload_cases(add, workload, inst)
        _regressions(add, sdpa + others)
    return plan


def _regressions(add: Any, backends: Sequence[str]) -> None:
    """The cases every run keeps: a static-rule confirmation, bottom-right causal with
    seq_q < seq_kv, and the seed-004 strided GQA inputs."""
    for b in backends:
        if b in SDPA_BACKENDS:
            add(make_case(b, head_dim_qk=320, head_dim_v=320, mask="no_mask", direction="fwd",
                          purpose="static rule: flash and cuDNN SDPA refuse head_dim > 256"))
        add(make_case(b, seq_q=128, seq_kv=384, mask="causal_bottom_right",
                      purpose="bottom-right causal, seq_q < seq_kv"))
        add(_seed004(b))


def _seed004(b: str) -> CaseSpec:
    return make_case(b, dtype="fp16", head_dim_qk=64, head_dim_v=64, heads_q=16, heads_kv=1,
                     seq_q=2048, seq_kv=2048, batch=1, layout="strided-qkv",
                     purpose="seed 004: q/k/v strided views split from one fused QKV tensor")


def _features(add: Any, backends: Sequence[str], flex: bool) -> None:
    for b in backends:
        add(make_case(b, head_dim_qk=192, head_dim_v=128, purpose="MLA: head_dim_qk != head_dim_v"))
        add(make_case(b, heads_q=8, heads_kv=2, purpose="GQA (enable_gqa / native)"))
        add(make_case(b, seq_q=128, seq_kv=384, mask="causal_bottom_right",
                      purpose="bottom-right causal, seq_q < seq_kv"))
        add(make_case(b, seq_q=128, seq_kv=384, mask="causal",
                      purpose="top-left causal, seq_q < seq_kv"))
        add(make_case(b, seq_q=128, seq_kv=128, mask="no_mask", dropout=0.125,
                      purpose="dropout (mask read back through a diagonal V)"))
        add(make_case(b, head_dim_qk=64, head_dim_v=64, batch=4, layout="varlen",
                      mask="no_mask", purpose="varlen / THD (nested tensors for SDPA)"))
        add(make_case(b, head_dim_qk=64, head_dim_v=64, batch=4, layout="varlen",
                      mask="causal", purpose="varlen / THD, causal"))
        add(_seed004(b))
        add(make_case(b, window=(64, 0), purpose="sliding window (explicit mask for SDPA)"))
        add(make_case(b, softcap=30.0, purpose="logit softcap"))
        add(make_case(b, seq_q=16, seq_kv=512, mask="causal_bottom_right", direction="fwd",
                      layout="kvcache", purpose="KV-cache decode path"))
        add(make_case(b, dtype="fp8", direction="fwd", mask="no_mask", purpose="fp8 forward"))
    if flex:
        for kw in ({}, {"window": (64, 0)}, {"softcap": 30.0},
                   {"seq_q": 128, "seq_kv": 384, "mask": "causal_bottom_right"},
                   {"heads_q": 8, "heads_kv": 2}):
            add(make_case("sdpa.flex", purpose="flex_attention (compiled): masks SDPA cannot "
                          "express", **kw))
        add(_seed004("sdpa.flex"))


def _workload_dims(w: Workload) -> Dict[str, Any]:
    dtype = w.dtype if w.dtype in ("fp16", "bf16") else "bf16"
    mask = w.mask
    layout = "bshd"
    if w.varlen or w.qkv_format == "thd" or mask.startswith("padding"):
        layout = "varlen"
        mask = mask.replace("padding_", "").replace("padding", "no_mask")
    if mask == "arbitrary":
        mask = "no_mask"
    if layout == "bshd" and w.qkv_packed and w.head_dim_qk == w.head_dim_v \
            and w.seq_len_q == w.seq_len_kv:
        layout = "strided-qkv"
    window = tuple(w.window_size) if w.sliding_window and w.window_size is not None else None
    return dict(dtype=dtype, head_dim_qk=w.head_dim_qk, head_dim_v=w.head_dim_v,
                heads_q=w.num_heads, heads_kv=w.num_kv_heads, mask=mask, window=window,
                softcap=float(w.softcap), layout=layout,
                direction="fwdbwd" if w.training else "fwd")


def _capped(sq: int, skv: int, cap: int) -> Tuple[int, int]:
    longest = max(sq, skv)
    if longest <= cap:
        return sq, skv
    return max(1, sq * cap // longest), max(1, skv * cap // longest)


def _workload_cases(add: Any, w: Workload, backends: Sequence[str]) -> None:
    dims = _workload_dims(w)
    needs_flex = bool(dims["window"] is not None or dims["softcap"]
                      or w.attn_implementation == "flex_attention")
    chosen = [b for b in backends if b != "sdpa.flex" or needs_flex]
    if needs_flex and "sdpa.flex" not in backends and "sdpa.math" in backends:
        chosen.append("sdpa.flex")  # flex ships with torch >= 2.5; the worker says if not
    for b in chosen:
        bench = make_case(b, batch=w.batch_size, seq_q=w.seq_len_q, seq_kv=w.seq_len_kv,
                          dropout=w.dropout, bench=True, judge=False,
                          purpose="workload shape: timing", **dims)
        if not_expressible(bench) is not None:
            continue  # this API cannot run the workload as stated
        shape = _shape_key(bench)
        sq, skv = _capped(w.seq_len_q, w.seq_len_kv, JUDGE_SEQ_CAP)
        judged = dict(dims)
        if dims["window"] is not None and sq != w.seq_len_q:
            # keep the window active at the capped length: scale it like the sequence
            judged["window"] = tuple(x if x <= 0 else max(1, x * sq // w.seq_len_q)
                                     for x in dims["window"])
        add(make_case(b, batch=1, seq_q=sq, seq_kv=skv, shape=shape,
                      purpose="workload shape: correctness (length capped)", **judged))
        if w.dropout:
            s = min(128, w.head_dim_v)
            d2 = dict(dims, mask="no_mask" if dims["mask"] == "no_mask" else "causal",
                      layout="bshd", window=None)
            add(make_case(b, batch=1, seq_q=s, seq_kv=s, dropout=w.dropout, shape=shape,
                          purpose="workload dropout (diagonal V)", **d2))
        add(replace(bench, shape=shape))


def _bench(add: Any, w: Workload, backends: Sequence[str]) -> None:
    """Timing at the default workload shape plus its capped correctness twin."""
    _workload_cases(add, w, backends)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TensorCheck:
    name: str  # out | dq | dk | dv
    rel_error: Optional[float]
    baseline: float
    tolerance: float
    nonfinite: int = 0
    unwritten: int = 0


@dataclass(frozen=True)
class CaseDetail:
    """What the JSON report keeps beyond CaseResult: the per-tensor errors and evidence."""

    id: str
    purpose: str
    seconds: Optional[float]
    checks: Tuple[TensorCheck, ...] = ()
    stderr_tail: str = ""


@dataclass(frozen=True)
class Phases:
    worker_start_s: float = 0.0  # spawn -> interpreter up (first worker)
    import_s: float = 0.0  # import torch (first worker)
    cuda_init_s: float = 0.0  # CUDA context + first kernel (first worker)
    cases_s: float = 0.0  # time inside cases, all workers
    restart_s: float = 0.0  # start-up time of replacement workers after crashes/timeouts
    total_s: float = 0.0
    workers: int = 0


@dataclass(frozen=True)
class Environment:
    device: Optional[str] = None  # cuda | cpu
    gpu: Optional[str] = None
    capability: Optional[str] = None
    driver: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    python: Optional[str] = None
    packages: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Timing:
    shape: str
    backend: str
    case_id: str
    ms: float
    tflops: Optional[float]
    correct: bool  # every correctness case of this backend for the shape passed


@dataclass(frozen=True)
class KernelRun:
    results: Tuple[CaseResult, ...]
    details: Tuple[CaseDetail, ...]
    phases: Phases
    environment: Environment
    timings: Tuple[Timing, ...] = ()
    fastest: Tuple[Timing, ...] = ()  # per shape: the fastest backend that passed
    cases: Tuple[CaseSpec, ...] = ()

    def counts(self) -> Dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self) -> Dict[str, Any]:
        """The document committed under docs/gpu-runs/ (schema in docs/kernels.md)."""
        env = asdict(self.environment)
        env["packages"] = dict(self.environment.packages)
        details = {d.id: d for d in self.details}
        specs = {c.id: c for c in self.cases}
        cases = []
        for r in self.results:
            d = details.get(r.id)
            c = specs.get(r.id)
            cases.append({
                **asdict(r),
                "purpose": d.purpose if d else "",
                "seconds": d.seconds if d else None,
                "checks": [asdict(t) for t in d.checks] if d else [],
                "stderr_tail": d.stderr_tail if d else "",
                "spec": c.to_json() if c else None,
            })
        return {
            "schema": "attn-doctor.kernels/1",
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": env,
            "phases": asdict(self.phases),
            "counts": self.counts(),
            "fastest": [asdict(t) for t in self.fastest],
            "timings": [asdict(t) for t in self.timings],
            "cases": cases,
        }


# --------------------------------------------------------------------------- running


def kernels_dir() -> Path:
    """The installed doctor/_data/kernels, else the source tree's kernels/."""
    try:
        from importlib.resources import files

        p = files("doctor").joinpath("_data").joinpath("kernels")
        if p.is_dir() and p.joinpath("worker.py").is_file():
            return Path(str(p))
    except Exception:
        pass
    src = Path(__file__).resolve().parent.parent / "kernels"
    if (src / "worker.py").is_file():
        return src
    raise FileNotFoundError("kernel worker not found (neither doctor/_data/kernels nor kernels/)")


def _notify(observer: Any, method: str, *args: Any) -> None:
    fn = getattr(observer, method, None) if observer is not None else None
    if callable(fn):
        fn(*args)


def _tail(path: Path, limit: int = 2000) -> str:
    """The end of a worker's stderr, without faulthandler's list of extension modules."""
    try:
        text = path.read_bytes()[-4 * limit:].decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if not ln.startswith("Extension modules:")]
    return "\n".join(lines).strip()[-limit:]


def _exit_text(rc: Optional[int]) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


class _Worker:
    """One worker process: JSON in on stdin, events out through a reader thread."""

    def __init__(self, python: str, cases: Sequence[CaseSpec], device: str,
                 env: Optional[Mapping[str, str]], stderr_path: Path) -> None:
        self.t_spawn = time.time()
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [python, "-u", str(kernels_dir() / "worker.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=full_env, start_new_session=True,
        )
        self.events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        doc = json.dumps({"protocol": PROTOCOL, "device": device,
                          "cases": [c.to_json() for c in cases]})
        threading.Thread(target=self._feed, args=(doc,), daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    def _feed(self, doc: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(doc.encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # not a protocol line
            if isinstance(ev, dict):
                self.events.put(ev)
        self.events.put(None)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: only our worker
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.wait()

    def wait(self) -> Optional[int]:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self._stderr.close()

    def stderr_tail(self) -> str:
        return _tail(self.stderr_path)


def run_cases(cases: Sequence[CaseSpec], *, python: str = sys.executable,
              timeout_s: float = DEFAULT_TIMEOUT_S, observer: Any = None,
              env: Optional[Mapping[str, str]] = None, device: str = "auto",
              startup_timeout_s: float = STARTUP_TIMEOUT_S) -> KernelRun:
    """Run the cases in worker processes; restart after a crash or timeout."""
    t0 = time.time()
    _notify(observer, "on_start", len(cases))
    pending: List[CaseSpec] = list(cases)
    results: Dict[str, CaseResult] = {}
    details: Dict[str, CaseDetail] = {}
    env_ev: Dict[str, Any] = {}
    ph: Dict[str, float] = {"worker_start_s": 0.0, "import_s": 0.0, "cuda_init_s": 0.0,
                            "cases_s": 0.0, "restart_s": 0.0}
    workers = 0

    def record(spec: CaseSpec, status: str, detail: str, *, max_rel: Optional[float] = None,
               ms: Optional[float] = None, tflops: Optional[float] = None,
               seconds: Optional[float] = None, checks: Tuple[TensorCheck, ...] = (),
               tail: str = "") -> None:
        r = CaseResult(id=spec.id, backend=spec.backend, status=status, detail=detail,
                       max_rel_error=max_rel, ms=ms, tflops=tflops)
        results[spec.id] = r
        details[spec.id] = CaseDetail(spec.id, spec.purpose, seconds, checks, tail)
        _notify(observer, "on_case", r)

    with tempfile.TemporaryDirectory(prefix="attn-doctor-") as tmp:
        while pending:
            try:
                w = _Worker(python, pending, device, env, Path(tmp) / f"worker{workers}.stderr")
            except OSError as exc:
                for c in pending:
                    record(c, "skipped", f"kernel worker could not be started with {python}: "
                           f"{exc}")
                pending.clear()
                break
            workers += 1
            by_id = {c.id: c for c in pending}
            current: Optional[CaseSpec] = None
            started = False
            t_case = t_env = None
            deadline = time.time() + startup_timeout_s
            while True:
                try:
                    ev = w.events.get(timeout=max(0.0, deadline - time.time()))
                except queue.Empty:
                    w.kill()
                    tail = w.stderr_tail()
                    if current is not None:
                        limit = current.timeout_s or timeout_s
                        record(current, "timeout", f"no result within {limit:g} s; worker "
                               "killed", seconds=time.time() - (t_case or t0), tail=tail)
                        pending.remove(current)
                    else:
                        why = "did not start" if not started else "stalled between cases"
                        for c in pending:
                            record(c, "skipped", f"kernel worker {why} within "
                                   f"{startup_timeout_s:g} s", tail=tail)
                        pending.clear()
                    break
                if ev is None:  # worker exited
                    rc = w.wait()
                    tail = w.stderr_tail()
                    if current is not None:
                        record(current, "crashed", f"worker {_exit_text(rc)} during the case",
                               seconds=time.time() - (t_case or t0), tail=tail)
                        pending.remove(current)
                    elif not started:
                        last = tail.splitlines()[-1] if tail else _exit_text(rc)
                        for c in pending:
                            record(c, "skipped", f"kernel worker failed to start: {last}",
                                   tail=tail)
                        pending.clear()
                    break
                kind = ev.get("event")
                now = time.time()
                if kind == "hello":
                    if workers == 1:
                        ph["worker_start_s"] = now - w.t_spawn
                elif kind == "env":
                    started = True
                    t_env = now
                    if workers == 1:
                        env_ev = ev
                        ph["import_s"] = float(ev.get("import_s") or 0.0)
                        ph["cuda_init_s"] = float(ev.get("cuda_init_s") or 0.0)
                    else:
                        ph["restart_s"] += now - w.t_spawn
                    deadline = now + timeout_s
                elif kind == "start":
                    current = by_id.get(str(ev.get("id")))
                    t_case = now
                    limit = (current.timeout_s if current and current.timeout_s else timeout_s)
                    deadline = now + limit
                elif kind == "result":
                    spec = by_id.get(str(ev.get("id")))
                    if spec is not None and spec in pending:
                        checks = tuple(TensorCheck(**{k: c.get(k) for k in
                                                      ("name", "rel_error", "baseline",
                                                       "tolerance", "nonfinite", "unwritten")})
                                       for c in ev.get("checks") or [])
                        status = str(ev.get("status"))
                        record(spec, status if status in STATUSES else "failed",
                               str(ev.get("detail", "")), max_rel=ev.get("max_rel_error"),
                               ms=ev.get("ms"), tflops=ev.get("tflops"),
                               seconds=ev.get("seconds"), checks=checks,
                               tail=w.stderr_tail() if status == "crashed" else "")
                        pending.remove(spec)
                    current = None
                    deadline = now + timeout_s
                elif kind == "done":
                    w.wait()
                    break
            if t_env is not None:
                ph["cases_s"] += time.time() - t_env
            if w.proc.poll() is None:
                w.kill()

    ordered = tuple(results[c.id] for c in cases if c.id in results)
    run = KernelRun(
        results=ordered,
        details=tuple(details[c.id] for c in cases if c.id in details),
        phases=Phases(total_s=time.time() - t0, workers=workers, **ph),
        environment=_environment(env_ev),
        cases=tuple(cases),
    )
    timings, fastest = _timings(run)
    run = replace(run, timings=timings, fastest=fastest)
    _notify(observer, "on_done", run)
    return run


def _environment(ev: Mapping[str, Any]) -> Environment:
    names = {f.name for f in fields(Environment)} - {"packages"}
    kw = {k: (str(v) if v is not None else None) for k, v in ev.items() if k in names}
    pk = ev.get("packages") or {}
    return Environment(packages=tuple(sorted((str(k), str(v)) for k, v in pk.items())), **kw)


def _timings(run: KernelRun) -> Tuple[Tuple[Timing, ...], Tuple[Timing, ...]]:
    """Per shape and backend: the timed case, whether its correctness twins passed, and
    the fastest backend whose cases for that shape all passed."""
    by_id = {r.id: r for r in run.results}
    timings: List[Timing] = []
    for c in run.cases:
        r = by_id.get(c.id)
        if not c.bench or c.shape is None or r is None or r.ms is None or r.status != "passed":
            continue
        twins = [by_id.get(o.id) for o in run.cases
                 if o.shape == c.shape and o.backend == c.backend and o.id != c.id]
        correct = bool(twins) and all(t is not None and t.status == "passed" for t in twins)
        timings.append(Timing(c.shape, c.backend, c.id, float(r.ms),
                              float(r.tflops) if r.tflops is not None else None, correct))
    fastest: Dict[str, Timing] = {}
    for t in timings:
        if t.correct and (t.shape not in fastest or t.ms < fastest[t.shape].ms):
            fastest[t.shape] = t
    return tuple(timings), tuple(fastest.values())


# --------------------------------------------------------------------------- facts


def kernels_available(facts: Facts) -> Tuple[bool, str]:
    """Whether the kernel stage can run here: torch with CUDA and a GPU; else why not."""
    t = facts.torch
    if t.version is None:
        return False, "torch is not installed"
    if t.hip:
        return False, f"torch {t.version} is a ROCm build; the kernel cases target CUDA"
    if not t.cuda:
        return False, f"torch {t.version} is a CPU-only build (no CUDA)"
    if facts.gpus is None:
        why = facts.unknown.get("gpus", "not probed")
        return False, f"GPUs could not be probed ({why})"
    if not facts.gpus:
        return False, "no NVIDIA GPU found"
    if t.cuda_available is False:
        return False, (f"torch {t.version} (CUDA {t.cuda}) cannot use the GPU: "
                       "torch.cuda.is_available() is False")
    return True, ""


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_backends(facts: Optional[Facts] = None) -> Set[str]:
    """Backend ids whose library is installed: from facts.packages, or (no facts) from the
    distributions visible to this interpreter."""
    if facts is not None and facts.packages is not None:
        pkgs = {_norm(k): v for k, v in facts.packages.items()}
    else:
        from importlib import metadata

        pkgs = {}
        for dist in metadata.distributions():
            try:
                pkgs[_norm(dist.metadata["Name"])] = dist.version
            except Exception:
                continue
    found: Set[str] = set()
    if "torch" in pkgs:
        found.update(SDPA_BACKENDS)
        if "triton" in pkgs or "pytorch-triton" in pkgs:
            found.add("sdpa.flex")
    if "flash-attn" in pkgs:
        found.add("flash_attn.fa2")
    if "flash-attn-3" in pkgs or "flash-attn-hopper" in pkgs:
        found.add("flash_attn.fa3")
    if "flash-attn-4" in pkgs:
        found.add("flash_attn.fa4")
    if any(k.startswith("transformer-engine") for k in pkgs):
        found.update(TE_BACKENDS)
    if "xformers" in pkgs:
        found.add("xformers.cutlass")
    return found


# --------------------------------------------------------------------------- command line


def _load_workload(path: str) -> Workload:
    """A workload file: a JSON or YAML mapping of doctor.model.Workload fields."""
    from doctor.bounded import load_document

    data, _ = load_document(path, "yaml" if path.endswith((".yaml", ".yml")) else "json", what="workload file")
    data = data.get("workload", data)
    names = {f.name for f in fields(Workload)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise SystemExit(f"unknown workload fields: {', '.join(unknown)}")
    if data.get("window_size") is not None:
        data["window_size"] = tuple(data["window_size"])
    return Workload(**data, source=path)


class _PartialWriter:
    """Observer for the command line: keeps a partial report on disk while cases run, so a
    run cut short by an outer time limit still leaves its evidence."""

    def __init__(self, out: Path, plan: Mapping[str, Any], total: int) -> None:
        self.out, self.plan, self.total = out, dict(plan), total
        self.results: List[Dict[str, Any]] = []

    def on_case(self, result: CaseResult) -> None:
        self.results.append(asdict(result))
        doc = {"schema": "attn-doctor.kernels/1", "partial": True, "plan": self.plan,
               "planned": self.total, "cases": self.results}
        self.out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m doctor.verify",
                                 description="Run the attention kernel cases and write JSON.")
    ap.add_argument("--out", required=True, help="write the JSON report here")
    ap.add_argument("--workload", help="JSON/YAML file with doctor.model.Workload fields")
    ap.add_argument("--suite", default="default", choices=("default", "full"))
    ap.add_argument("--backends", help="comma-separated backend ids (default: installed)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the worker")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per case")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--only", action="append", default=[],
                    help="keep only cases whose id matches this glob (repeatable)")
    args = ap.parse_args(argv)
    installed = (set(args.backends.split(",")) if args.backends else installed_backends())
    workload = _load_workload(args.workload) if args.workload else None
    cases = plan_cases(workload, installed, suite=args.suite)
    if args.only:
        cases = [c for c in cases if matches(c.id, args.only)]
    plan = {"suite": args.suite, "only": args.only, "workload": asdict(workload) if workload else None,
            "installed": sorted(installed)}
    out = Path(args.out)
    run = run_cases(cases, python=args.python, timeout_s=args.timeout, device=args.device,
                    observer=_PartialWriter(out, plan, len(cases)))
    doc = run.to_json()
    doc["plan"] = plan
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    c = run.counts()
    sys.stderr.write(" ".join(f"{k}={v}" for k, v in c.items() if v)
                     + f" total_s={run.phases.total_s:.2f} -> {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
