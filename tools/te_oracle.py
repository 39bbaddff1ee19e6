"""TransformerEngine's own backend selection as the oracle for the doctor's TE model.

For every TE release on PyPI from 1.9 to the newest, this downloads the pure-Python wheel
(`pip download --no-deps transformer-engine==X`, cached), runs its `get_attention_backend`
on a CPU (tools/te_runtime.py: the C++ extension, cuDNN, flash-attn and triton stubbed, the
GPU's compute capability and the cuDNN version faked) over a generated matrix of GPUs, cuDNN
versions, installed flash-attn / FA3 / FA4 builds, NVTE_* switches and workloads, and
compares TE's per-backend availability and choice with what the doctor's catalogue says for
the same inputs (doctor.rules.evaluate.diagnose).

The C++ half of TE's decision (`nvte_get_fused_attn_backend`: which cuDNN sub-backend, if
any, supports the inputs) does not run on a CPU. It is injected both ways for every case:
"supported" (F16 arbitrary-seqlen, or FP8 for fp8) and "no backend". The doctor's rules that
model that C++ function (CPP_RULES) are set aside on the doctor's side, and the "no backend"
sweep adds one rule that switches FusedAttention off, so each side answers the same question:
given this C++ verdict, what do TE's Python filters and preference order make of it.

Releases with no wheel on PyPI (TE 2.0, TE <= 1.8) are taken from their tag in a git mirror
of NVIDIA/TransformerEngine (--te-mirror; `--versions tags`). TE 2.0 runs through
get_attention_backend like the wheels; TE <= 1.8, which decide inline, run
DotProductAttention.forward with the three backends replaced by recorders
(te_runtime.Release.run_forward): there only the backend TE called, or the error it raised,
is compared.

Usage (a Python with torch, numpy, pydantic, einops, pyyaml and packaging; see
docs/te-oracle/README.md):

    python tools/te_oracle.py --out te-oracle.json
    python tools/te_oracle.py --out subset.json --versions 2.3.0,2.18.0 --per-version 200
    python tools/te_oracle.py --out tags.json --versions tags --te-mirror PATH/TO/TransformerEngine.git

Writes {"cases": N, "agree": M, "by_version": {...}, "disagreements": [...], ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The newest patch of every minor release from 1.9 on (2.0 was never published to PyPI).
DEFAULT_VERSIONS = (
    "1.9.0.post1", "1.10.0", "1.11.0", "1.12.0", "1.13.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0",
    "2.5.0", "2.6.0.post1", "2.7.0", "2.8.0", "2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.13.0",
    "2.14.1", "2.15.0", "2.16.1", "2.17.1", "2.18.0", "2.19.0", "2.20.2",
)  # fmt: skip

# Releases with no wheel, run from their tags (TE 2.0 through get_attention_backend; TE <= 1.8,
# which decide inline, through DotProductAttention.forward): the newest patch of each minor.
TAG_VERSIONS = ("1.0.0", "1.1.0", "1.2.1", "1.3.0", "1.4.0", "1.5.0", "1.6.0", "1.7.0", "1.8.0", "2.0.0")

# Doctor rules that model the C++ function nvte_get_fused_attn_backend (fused_attn.cpp):
# on the oracle's side that decision is injected, so these are set aside when comparing.
CPP_RULES = frozenset(
    {
        "TE-FUSED-CUDNN-LT-8-9",
        "TE-FUSED-ARCH-CUDNN",
        "TE-FUSED-SM120-CUDNN",
        "TE-FUSED-HOPPER-HEADDIM",
        "TE-FUSED-BLACKWELL-HEADDIM",
        "TE-FUSED-HOPPER-MLA-BPROP-CUDNN",
        "TE-FUSED-HEADDIM-NOT-MULT8",
        "TE-FUSED-SEQ-MOD64-CUDNN-LT-9",
        "TE-FUSED-GQA-CUDNN-LT-8-9-7",
        "TE-FUSED-MASK-CUDNN",
        "TE-FUSED-BOTTOM-RIGHT-SHAPE",
        "TE-FUSED-THD-LAYOUT",
        "TE-FUSED-CUDNN-9-10-EXCLUDED",
        "TE-FUSED-CUDNN-9-14-0-SWA",
        "TE-FUSED-CUDNN-9-2-TO-9-5-MASKS",
        "TE-FUSED-HEADDIM-GT128-PRE-HOPPER",
        # the mixed sbhd_2bshd layout TE's own KV cache makes of sbhd input: cuDNN 9.7 (fused_attn.cpp)
        "TE-FUSED-KV-CACHE-SBHD-LAYOUT",
        # C++ conditions only (cuDNN version, arch, head dims, masks, bias); TE's Python filters
        # on the same features are separate rules (TE-FUSED-*-FILTERS, TE-FUSED-SM120-*), which
        # the oracle checks. docs/audit/te-fused-audit.md audits these against the tags.
        "TE-FUSED-ALIBI",
        "TE-FUSED-SLIDING-WINDOW",
        "TE-FUSED-FP8",
        "TE-FUSED-DETERMINISTIC",
        # the F16 arbitrary-seqlen backend takes a sink softmax only from cuDNN 9.13.1 (TE 2.8+)
        "TE-FUSED-SINK-SOFTMAX-CUDNN",
        # ROCm's TE fork: its C++ backend choice (CK for gfx942, AOTriton for gfx942/gfx90a);
        # the oracle runs NVIDIA's releases on CUDA cases, where it never fires
        "TE-FUSED-ROCM-ARCH",
    }
)

# Rules that mix Python filters and C++ conditions: kept on the doctor's side (their Python
# half is what the oracle checks; where their C++ half fires alone, the disagreement is
# listed in docs/te-oracle/disagreements.md).
MIXED_RULES: frozenset = frozenset()

BACKENDS = ("te.flash", "te.fused", "te.unfused")

# --------------------------------------------------------------------------- wheels


def cache_dir(explicit: Optional[str]) -> Path:
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attn-doctor" / "te-oracle"


# Releases with no wheel on PyPI: TE 2.0 was never published there, and TE <= 1.8 shipped no
# pure-Python wheel. Their Python is taken from the release tag in a git mirror of
# NVIDIA/TransformerEngine (`git archive vX.Y transformer_engine`: the same files a wheel holds).
NO_WHEEL = frozenset({"2.0.0", "1.8.0", "1.7.0", "1.6.0", "1.5.0", "1.4.0", "1.3.0", "1.2.1", "1.2.0", "1.1.0", "1.0.0"})
DEFAULT_MIRROR = "/work/.mirror/NVIDIA+TransformerEngine/repo"


def release_tag(version: str, mirror: str) -> str:
    """The git tag of a release: v2.0 for 2.0.0, v1.2.1 for 1.2.1 (checked against VERSION.txt)."""
    parts = version.split(".")
    candidates = [f"v{version}", f"v{'.'.join(parts[:2])}"] if parts[2:] == ["0"] else [f"v{version}"]
    for tag in candidates:
        for vfile in ("build_tools/VERSION.txt", "VERSION"):  # VERSION up to 1.8
            got = subprocess.run(["git", "-C", mirror, "show", f"{tag}:{vfile}"], capture_output=True, text=True)
            if got.returncode == 0 and got.stdout.strip().split("dev")[0].rstrip(".") == version:
                return tag
    raise SystemExit(f"te_oracle: no tag for TE {version} in the mirror {mirror} (tried {', '.join(candidates)})")


def fetch_release(version: str, cache: Path, mirror: Optional[str] = None) -> Path:
    """The extracted Python of one TE release: its wheel from PyPI, or (for the releases in
    NO_WHEEL) its tag in the git mirror; extracted once, then reused."""
    root = cache / "extracted" / version
    if (root / "transformer_engine" / "pytorch").is_dir():
        return root
    tmp = root.with_name(root.name + ".tmp")
    if version in NO_WHEEL:
        mirror = mirror or DEFAULT_MIRROR
        tag = release_tag(version, mirror)
        tmp.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", mirror, "archive", tag, "transformer_engine"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        (tmp / "SOURCE").write_text(f"git tag {tag} of NVIDIA/TransformerEngine\n", encoding="utf-8")
        tmp.rename(root)
        return root
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"transformer_engine-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"transformer-engine=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"transformer_engine-{version}-*.whl"))
    if not found:
        raise SystemExit(f"te_oracle: no wheel for transformer-engine=={version} in {wheels}")
    with zipfile.ZipFile(found[0]) as z:
        z.extractall(tmp)
    tmp.rename(root)
    return root


# --------------------------------------------------------------------------- the matrix

SMS = (70, 75, 80, 86, 89, 90, 100, 120)
CUDNN = ("8.9.2", "8.9.7", "9.1.0", "9.3.0", "9.5.1", "9.8.0", "9.10.2", "9.13.0", "9.18.1", "9.20.0")
FLASH_SETS: Tuple[Dict[str, str], ...] = (
    {},
    {"flash-attn": "2.3.6"},
    {"flash-attn": "2.5.8"},
    {"flash-attn": "2.6.3"},
    {"flash-attn": "2.7.4.post1"},
    {"flash-attn": "2.8.1"},
    {"flash-attn": "2.8.3"},
    {"flash-attn": "2.8.3+cu12torch2.8cxx11abifalse"},
    {"flash-attn-3": "3.0.0b1"},
    {"flashattn-hopper": "3.0.0b1"},
    {"flash-attn": "2.7.4.post1", "flash-attn-3": "3.0.0b1"},
    {"flash-attn": "2.6.3", "flashattn-hopper": "3.0.0b1"},
    {"flash-attn-4": "4.0.0b11"},
    {"flash-attn": "2.8.3", "flash-attn-4": "4.0.0b11"},
    {"flash-attn": "2.6.3", "flash-attn-4": "4.0.0b11"},
    # FA3 and FA4 together, and all three: where TE's per-member filters and its FA3-over-FA4
    # preference on sm90 decide (te.flash is a family of te.fa2/te.fa3/te.fa4 in the doctor)
    {"flash-attn-3": "3.0.0b1", "flash-attn-4": "4.0.0b11"},
    {"flash-attn": "2.8.3", "flash-attn-3": "3.0.0b1", "flash-attn-4": "4.0.0b11"},
    {"flash-attn": "2.7.4.post1", "flashattn-hopper": "3.0.0b1"},
)
# TE <= 1.8 build FlashAttention in DotProductAttention.__init__ and assert there that flash-attn
# is inside their window (2.0.6 ..; 1.7-1.8: .. 2.5.8): most of their draws take one inside it.
LEGACY_FLASH_SETS: Tuple[Dict[str, str], ...] = (
    {"flash-attn": "2.0.9"},
    {"flash-attn": "2.2.5"},
    {"flash-attn": "2.3.6"},
    {"flash-attn": "2.4.2"},
    {"flash-attn": "2.5.6"},
    {"flash-attn": "2.5.8"},
)
# FA3 runs only on Hopper (sm90+ before TE 2.2): draws with FA3 installed mostly take sm90
SMS_WITH_FA3 = (90, 90, 90, 80, 100)
ENVS: Tuple[Dict[str, str], ...] = (
    {},
    {},
    {},
    {"NVTE_FLASH_ATTN": "0"},
    {"NVTE_FUSED_ATTN": "0"},
    {"NVTE_UNFUSED_ATTN": "0"},
    {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0"},
    {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0"},
    {"NVTE_FLASH_ATTN_V2": "0"},
    {"NVTE_FLASH_ATTN_V3": "0"},
    {"NVTE_FLASH_ATTN_V4": "0"},
)
HEAD_DIMS = ((128, 128), (64, 64), (96, 96), (256, 256), (192, 128), (80, 80), (100, 100), (128, 64), (512, 512))
HEADS = ((32, 32), (32, 8), (32, 1), (16, 4), (12, 3))
SEQS = ((4096, 4096), (2048, 2048), (1000, 1000), (512, 512), (2048, 4096), (4096, 2048))
MASKS = ("no_mask", "causal", "causal_bottom_right", "padding", "padding_causal", "padding_causal_bottom_right", "arbitrary")
WINDOWS = (None, None, None, (4095, 0), (128, 128), (-1, -1), (-1, 0))
CPS = ((1, "p2p"), (1, "p2p"), (1, "p2p"), (2, "p2p"), (2, "a2a"), (2, "all_gather"), (4, "a2a+p2p"))
# TE >= 2.8 softmax_type: mostly vanilla, a sink softmax in one draw of three
SOFTMAX_TYPES = ("vanilla", "vanilla", "vanilla", "vanilla", "off-by-one", "learnable")


def _pick(rng: random.Random, seq: Sequence[Any]) -> Any:
    return seq[rng.randrange(len(seq))]


def generate(version: str, n: int, seed: int) -> List[Dict[str, Any]]:
    """`n` workload/platform draws for one TE release, each swept over both C++ verdicts."""
    rng = random.Random(f"{seed}:{version}")
    out: List[Dict[str, Any]] = []
    major = int(version.split(".")[0])
    minor = int(version.split(".")[1])
    while len(out) < 2 * n:
        flash = dict(_pick(rng, FLASH_SETS))
        if (major, minor) <= (1, 8) and rng.random() < 0.8:
            flash = dict(_pick(rng, LEGACY_FLASH_SETS))  # mostly inside TE 1.x's flash-attn window
        if "flash-attn-4" in flash and rng.random() < 0.85:
            flash["nvidia-cutlass-dsl"] = "4.6.2"  # FA4's own dependency; TE >= 2.19 checks it
        if (major, minor) <= (1, 11) and "flash-attn" not in flash:
            continue  # TE <= 1.11 does not import without flash-attn: nothing to compare
        fmt = _pick(rng, ("bshd", "bshd", "sbhd", "thd"))
        mask = _pick(rng, MASKS)
        if fmt == "thd" and "padding" not in mask:
            mask = _pick(rng, ("padding", "padding_causal", "padding_causal_bottom_right"))
        dq, dv = _pick(rng, HEAD_DIMS)
        h, hkv = _pick(rng, HEADS)
        sq, skv = _pick(rng, SEQS)
        cp_size, cp_comm = _pick(rng, CPS)
        dtype = _pick(rng, ("bf16", "bf16", "fp16", "fp32", "fp8"))
        base = {
            "te_version": version,
            "sm": _pick(rng, SMS_WITH_FA3 if {"flash-attn-3", "flashattn-hopper"} & set(flash) else SMS),
            "cudnn": _pick(rng, CUDNN),
            "packages": flash,
            "env": dict(_pick(rng, ENVS)),
            "dtype": dtype,
            "head_dim_qk": dq,
            "head_dim_v": dv,
            "num_heads": h,
            "num_kv_heads": hkv,
            "seq_len_q": sq,
            "seq_len_kv": skv,
            "mask": mask,
            "window_size": _pick(rng, WINDOWS),
            "alibi": rng.random() < 0.1,
            "dropout": 0.1 if rng.random() < 0.2 else 0.0,
            "qkv_format": fmt,
            "training": rng.random() < 0.75,
            "deterministic": rng.random() < 0.15,
            "cp_size": cp_size,
            "cp_comm_type": cp_comm,
        }
        base["cudnn_int"] = cudnn_int(base["cudnn"])
        if (major, minor) >= (2, 8):
            # DotProductAttention(softmax_type=...) from TE 2.8, drawn from its own generator so
            # that the other draws (and older releases' matrices) stay as they were
            side = random.Random(f"{seed}:{version}:softmax:{len(out)}")
            base["softmax_type"] = _pick(side, SOFTMAX_TYPES)
        for verdict in ("supported", "none"):
            case = dict(base)
            case["cpp"] = verdict
            case["fused_cpp"] = "none" if verdict == "none" else ("fp8" if dtype == "fp8" else "arbitrary")
            out.append(case)
    return out


def cudnn_int(text: str) -> int:
    major, minor, patch = (int(x) for x in text.split("."))
    return major * 1000 + minor * 100 + patch if major < 9 else major * 10000 + minor * 100 + patch


# --------------------------------------------------------------------------- TE's answers


def run_te(version: str, root: Path, cases: List[Dict[str, Any]], python: str) -> List[Dict[str, Any]]:
    """Feed the cases to one worker process that has this release loaded."""
    order = sorted(range(len(cases)), key=lambda i: (cases[i]["sm"], json.dumps(cases[i]["packages"], sort_keys=True)))
    payload = "".join(json.dumps(cases[i]) + "\n" for i in order)
    proc = subprocess.run(
        [python, str(REPO / "tools" / "te_runtime.py"), str(root), version],
        input=payload,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != len(cases):
        tail = proc.stderr.strip().splitlines()[-5:]
        raise SystemExit(f"te_oracle: TE {version} worker failed ({proc.returncode}): " + " | ".join(tail))
    results: List[Dict[str, Any]] = [{}] * len(cases)
    for i, line in zip(order, lines):
        results[i] = json.loads(line)
    return results


# --------------------------------------------------------------------------- the doctor's answers


class DoctorModel:
    def __init__(self) -> None:
        from doctor.rules.loader import Rule, load_catalogue

        cat = load_catalogue(use_cache=False)
        te_rules = [r for r in cat.rules if r.disables and r.disables.startswith("te.")]
        unknown = [r.id for r in te_rules if r.disables == "te.fused" and r.id not in CPP_RULES | MIXED_RULES and not _python_rule(r)]
        if unknown:
            raise SystemExit(f"te_oracle: classify these te.fused rules (C++ or Python): {unknown}")
        frameworks = tuple(f for f in cat.frameworks if f.id == "transformer-engine")
        # get_attention_backend runs its filters whenever it is called: the oracle asks TE's
        # selection code directly, so the rules are read as written, without the framework's
        # filters_reached_unless (an assert or autocast check earlier in a real run, e.g. FP8
        # below sm89, which the catalogue's error findings report)
        python_side = [replace(r, when=r.when_written) if r.when_written is not None else r for r in te_rules if r.id not in CPP_RULES]
        # TE's asserts are error findings in the doctor: a case where TE <= 1.8 raises agrees
        # when the doctor selects no TE backend or reports such an error
        python_side += [r for r in cat.rules if not r.disables and r.area == "transformer-engine" and r.severity == "error"]
        injected = Rule(
            id="ORACLE-CPP-NO-BACKEND",
            title="injected",
            message="the injected C++ decision: cuDNN has no fused sub-backend for these inputs",
            when={"env": "ORACLE_FUSED_CPP", "eq": "none"},
            sources=(),
            tests={},
            path="tools/te_oracle.py",
            line=0,
            disables="te.fused",
        )
        self.catalogue = replace(cat, frameworks=frameworks, rules=tuple(python_side) + (injected,))

    def answer(self, case: Dict[str, Any]) -> Dict[str, Any]:
        from doctor.rules.cases import case_inputs
        from doctor.rules.evaluate import diagnose

        facts, workload = case_inputs(doctor_case(case))
        d = diagnose(self.catalogue, facts, workload)
        avail = {b.id: b.available for b in d.backends}
        rules = {b.id: list(b.rule_ids) for b in d.backends}
        errors = [f.rule_id for f in d.findings if f.severity == "error" and f.status == "fired"]
        return {"available": avail, "selected": dict(d.selections).get("transformer-engine"), "rules": rules, "errors": errors}


def _python_rule(rule: Any) -> bool:
    return not any("fused_attn.cpp" in s for s in rule.sources)


def doctor_case(case: Dict[str, Any]) -> Dict[str, Any]:
    """The oracle case as a doctor rule-test case (a partial snapshot plus a workload)."""
    env = dict(case["env"])
    env["ORACLE_FUSED_CPP"] = "none" if case["cpp"] == "none" else "supported"
    wl: Dict[str, Any] = {
        k: case[k]
        for k in (
            "dtype", "head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "seq_len_q", "seq_len_kv",
            "mask", "alibi", "dropout", "qkv_format", "training", "deterministic",
        )
    }  # fmt: skip
    if case["window_size"] is not None:
        wl["window_size"] = list(case["window_size"])
    if "softmax_type" in case:
        wl["softmax_type"] = case["softmax_type"]
    if case["dtype"] == "fp8":
        wl["fp8_recipe"] = "delayed"  # te_runtime passes DelayedScaling(fp8_dpa=True) as fp8_meta's recipe
    wl["context_parallel"] = {"size": case["cp_size"], "comm_type": case["cp_comm_type"]}
    sm = case["sm"]
    return {
        "packages": {"transformer-engine": case["te_version"], **case["packages"]},
        "env": env,
        "gpu": f"{sm // 10}.{sm % 10}",
        "cudnn": {"version": case["cudnn"]},
        "workload": wl,
    }


# --------------------------------------------------------------------------- comparison


def left_undecided(doc: Dict[str, Any]) -> bool:
    """The doctor's answer for a release below its coverage: no backend judged, none selected."""
    return doc["selected"] is None and all(v is None for v in doc["available"].values())


def compare(te: Dict[str, Any], doc: Dict[str, Any]) -> Optional[str]:
    """None when they agree, else what differs."""
    if te["status"] == "construct_error" and te.get("mode") == "forward" and "FlashAttention" not in te["error"]:
        # TE <= 1.8 refuse the inputs when DotProductAttention is built (e.g. a window that
        # contradicts a causal mask): nothing runs, so the doctor must not select a backend
        return None if doc["selected"] is None or doc.get("errors") else f"TE raises at construction ({te['error']}); doctor selects {doc['selected']}"
    if te["status"] == "construct_error":
        # TE 1.9-1.11 assert when DotProductAttention builds FlashAttention: the doctor must
        # at least say FlashAttention cannot be used.
        return None if doc["available"].get("te.flash") is False else "TE raises at construction; doctor has te.flash usable"
    if te["status"] == "raised" and te.get("mode") == "forward":
        # TE <= 1.8 (DotProductAttention.forward run on the CPU): TE refuses the inputs (an
        # assert, or no backend left); the doctor must not select a TE backend either.
        return None if doc["selected"] is None or doc.get("errors") else f"TE raises ({te.get('error')}); doctor selects {doc['selected']}"
    if te["status"] != "ok":
        return f"TE {te['status']}: {te.get('error')}"
    if te.get("available") is None:
        # TE <= 1.8: only the backend forward called is observable, not each one's availability
        return None if te["selected"] == doc["selected"] else f"selected: TE {te['selected']} doctor {doc['selected']}"
    diffs = [f"{b}: TE {te['available'][b]} doctor {doc['available'].get(b)}" for b in BACKENDS if te["available"][b] != doc["available"].get(b)]
    if te["selected"] != doc["selected"]:
        diffs.append(f"selected: TE {te['selected']} doctor {doc['selected']}")
    return "; ".join(diffs) or None


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to write the JSON result")
    ap.add_argument("--versions", help="comma-separated TE releases (default: 1.9 .. 2.20, newest patch each; "
                    "'tags' for the releases run from git tags, 1.0 .. 1.8 and 2.0; 'all' for both)")
    ap.add_argument("--per-version", type=int, default=220, help="draws per release; each runs twice (C++ verdict both ways)")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--cache", help="wheel cache (default: $XDG_CACHE_HOME/attn-doctor/te-oracle)")
    ap.add_argument("--te-mirror", default=DEFAULT_MIRROR, help="git mirror of NVIDIA/TransformerEngine, for the "
                    "releases with no wheel on PyPI (2.0, <= 1.8): their Python is taken from the release tag")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the TE workers (needs torch, numpy, pydantic)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-disagreements", type=int, default=400, help="how many disagreements to list in full")
    ap.add_argument("--cases-out", help="also write every case with both answers (JSON lines)")
    ap.add_argument("--replay", help="take the cases and TE's answers from a --cases-out file instead of running TE")
    ap.add_argument("--coverage-out", help="also write, per rule, the cases where it switched a TE backend off "
                    "(and where it was the only reason), for rules/evidence/te-oracle-coverage.json")
    args = ap.parse_args(argv)

    if args.replay:
        cases, te_answers = load_cases(Path(args.replay))
        versions = list(cases)
    else:
        named = {"tags": list(TAG_VERSIONS), "all": sorted(DEFAULT_VERSIONS + TAG_VERSIONS, key=_vkey)}
        versions = named.get(args.versions or "", args.versions.split(",") if args.versions else list(DEFAULT_VERSIONS))
        cache = cache_dir(args.cache)
        roots = {v: fetch_release(v, cache, args.te_mirror) for v in versions}
        cases = {v: generate(v, args.per_version, args.seed) for v in versions}
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {v: pool.submit(run_te, v, roots[v], cases[v], args.python) for v in versions}
            te_answers = {v: f.result() for v, f in futures.items()}

    from doctor.versions import below_release

    model = DoctorModel()
    floor = model.catalogue.floors.get("transformer-engine")
    total = agree = 0
    by_version: Dict[str, Dict[str, Any]] = {}
    disagreements: List[Dict[str, Any]] = []
    kinds: Dict[str, int] = {}
    skipped: Dict[str, int] = {}
    dump = open(args.cases_out, "w", encoding="utf-8") if args.cases_out else None
    coverage: Dict[str, Dict[str, Any]] = {}
    for v in versions:
        if floor and below_release(v, floor):
            # below the catalogue's coverage: the doctor must decide nothing (doctor.rules.evaluate)
            judged = [c for c, te in zip(cases[v], te_answers[v]) if te["status"] != "not_applicable" and not left_undecided(model.answer(c))]
            by_version[v] = {"not_covered": True, "cases": len(cases[v]), "judged_anyway": len(judged)}
            continue
        n = a = 0
        for case, te in zip(cases[v], te_answers[v]):
            if te["status"] == "not_applicable":
                skipped[te["error"]] = skipped.get(te["error"], 0) + 1
                continue
            doc = model.answer(case)
            diff = compare(te, doc)
            _cover(coverage, v, doc, diff is None)
            n += 1
            if diff is None:
                a += 1
            else:
                key = diff_kind(diff)
                kinds[key] = kinds.get(key, 0) + 1
                if len(disagreements) < args.max_disagreements:
                    disagreements.append({"case": _short(case), "te": te, "doctor": doc, "diff": diff})
            if dump:
                dump.write(json.dumps({"case": case, "te": te, "agree": diff is None}) + "\n")
        by_version[v] = {"cases": n, "agree": a, "agreement": round(a / n, 4) if n else None}
        total += n
        agree += a
    if dump:
        dump.close()
    result = {
        "cases": total,
        "agree": agree,
        "agreement": round(agree / total, 4) if total else None,
        "by_version": by_version,
        "disagreement_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "skipped": skipped,
        "settings": {"per_version": args.per_version, "seed": args.seed, "versions": versions},
        "disagreements": disagreements,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.coverage_out:
        write_coverage(Path(args.coverage_out), coverage, total, agree, versions)
    print(f"te_oracle: {agree}/{total} agree ({100.0 * agree / max(total, 1):.2f}%); written to {args.out}")
    judged = {v: row["judged_anyway"] for v, row in by_version.items() if row.get("judged_anyway")}
    if judged:
        print(f"te_oracle: DIFFERS: the doctor judged releases below its coverage ({floor}): {judged}", file=sys.stderr)
        return 1
    return 0


def _cover(coverage: Dict[str, Dict[str, Any]], version: str, doc: Dict[str, Any], agreed: bool) -> None:
    """Count, per rule, the cases where it switched a TE backend off, and those where it was
    the only rule doing so (so the verdict TE gave for that backend rests on this rule)."""
    for backend, ids in doc["rules"].items():
        own = [i for i in ids if not i.startswith("ORACLE-")]
        for rule_id in own:
            row = coverage.setdefault(rule_id, {"fired": 0, "sole": 0, "disagree": 0, "sole_releases": set()})
            row["fired"] += 1
            row["disagree"] += 0 if agreed else 1
            if len(ids) == 1:
                row["sole"] += 1
                row["sole_releases"].add(version)


def write_coverage(path: Path, coverage: Dict[str, Dict[str, Any]], total: int, agree: int,
                   versions: Sequence[str]) -> None:
    from doctor.versions import version_key

    rules = {
        rid: {"fired": row["fired"], "sole": row["sole"], "disagree": row["disagree"],
              "sole_releases": sorted(row["sole_releases"], key=version_key)}
        for rid, row in sorted(coverage.items())
    }
    doc = {
        "about": "Written by tools/te_oracle.py --coverage-out: per TE backend rule, the oracle cases "
                 "(TE's own get_attention_backend, run from each release's wheel) in which it switched a "
                 "backend off, and those in which it was the only rule to do so. Do not edit.",
        "cases": total,
        "agree": agree,
        "releases": list(versions),
        "rules": rules,
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def load_cases(path: Path) -> Tuple[Dict[str, List[Dict[str, Any]]], Dict[str, List[Dict[str, Any]]]]:
    """A --cases-out file: per TE release, the cases and TE's recorded answers."""
    cases: Dict[str, List[Dict[str, Any]]] = {}
    answers: Dict[str, List[Dict[str, Any]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        v = rec["case"]["te_version"]
        cases.setdefault(v, []).append(rec["case"])
        answers.setdefault(v, []).append(rec["te"])
    return cases, answers


def _vkey(version: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def diff_kind(diff: str) -> str:
    return re.sub(r"\d+", "#", diff)[:160]


def _short(case: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in case.items() if k not in ("cudnn_int", "fused_cpp")}


if __name__ == "__main__":
    raise SystemExit(main())
