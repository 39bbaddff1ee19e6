"""Kernel cases: what to run. A CaseSpec is one attention call (backend, shape, layout,
direction); `plan_cases` chooses them for a workload and the installed backends, and
`installed_backends` / `kernels_available` say what can run here. Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from doctor.model import ContextParallel, Facts, Workload
from doctor.versions import canonical_name

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
    if spec.softcap and (b in SDPA_BACKENDS or b.startswith("xformers")):
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
    if spec.dtype == "fp8" and b != "flash_attn.fa3" and not b.startswith("te."):
        return "fp8 covered for FA3 and TransformerEngine only"
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
        _workload_cases(add, Workload(), inst if suite == "full" else [b for b in inst if b != "sdpa.flex"])
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


# Workload <-> CaseSpec: the one mapping between the user's attention shape and a kernel
# case's, in both directions (tests/verify/test_kernels_plan.py checks the round trip).


def case_dims(w: Workload) -> Dict[str, Any]:
    """The CaseSpec fields a workload's shape maps to (fp8 runs as bf16, padding as varlen)."""
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
    window = tuple(w.window_size) if w.window_size is not None and tuple(w.window_size) != (-1, -1) else None
    return dict(dtype=dtype, head_dim_qk=w.head_dim_qk, head_dim_v=w.head_dim_v,
                heads_q=w.num_heads, heads_kv=w.num_kv_heads, mask=mask, window=window,
                softcap=float(w.softcap), layout=layout,
                direction="fwdbwd" if w.training else "fwd")


def workload_for_case(spec: CaseSpec, base: Workload) -> Workload:
    """`base` with its shape replaced by the case's: what the backend model is asked about
    when it is checked against this case's kernel verdict."""
    return replace(
        base,
        dtype=spec.dtype,
        batch_size=spec.batch,
        num_heads=spec.heads_q,
        num_kv_heads=spec.heads_kv,
        seq_len_q=spec.seq_q,
        seq_len_kv=spec.seq_kv,
        head_dim_qk=spec.head_dim_qk,
        head_dim_v=spec.head_dim_v,
        mask=spec.mask,
        window_size=tuple(spec.window) if spec.window else None,  # type: ignore[arg-type]
        softcap=spec.softcap,
        dropout=spec.dropout,
        qkv_packed=spec.layout == "strided-qkv",
        varlen=spec.layout == "varlen",
        packing="varlen" if spec.layout == "varlen" else "padded",
        training=spec.direction == "fwdbwd",
        context_parallel=ContextParallel(),
    )


def _capped(sq: int, skv: int, cap: int) -> Tuple[int, int]:
    longest = max(sq, skv)
    if longest <= cap:
        return sq, skv
    return max(1, sq * cap // longest), max(1, skv * cap // longest)


def _workload_cases(add: Any, w: Workload, backends: Sequence[str]) -> None:
    dims = case_dims(w)
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


def installed_backends(facts: Optional[Facts] = None) -> Set[str]:
    """Backend ids whose library is installed: from facts.packages, or (no facts) from the
    distributions visible to this interpreter."""
    if facts is not None and facts.packages is not None:
        pkgs = {canonical_name(k): v for k, v in facts.packages.items()}
    else:
        from importlib import metadata

        pkgs = {}
        for dist in metadata.distributions():
            try:
                pkgs[canonical_name(dist.metadata["Name"])] = dist.version
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


