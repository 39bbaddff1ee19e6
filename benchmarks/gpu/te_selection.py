"""TransformerEngine's own backend selection on a GPU against the doctor's static prediction.

    python benchmarks/gpu/te_selection.py workloads OUT.json
        the workload grid (default profile plus one- and two-factor variations)
    python benchmarks/gpu/te_selection.py matrix N SEED OUT.json
        N random draws over the factors torch SDPA's filters read (dtype, head dims incl.
        odd and MLA pairs, heads and GQA, lengths, masks, windows, dropout, training,
        determinism, batch), for asking torch alone (`--libraries torch`)
    (device) python kernels/ask.py --libraries te,torch --input OUT.json > ANSWERS.jsonl
    python benchmarks/gpu/te_selection.py fa2-matrix N SEED OUT.json
        the same for flash-attn 2's own arguments (softcap, ALiBi, packed sequences), for
        benchmarks/gpu/fa2_ask.py, which calls its kernels on the GPU
    python benchmarks/gpu/te_selection.py te-matrix N SEED OUT.json
        the same over TransformerEngine's DotProductAttention arguments (fp8, thd, packed,
        padding and arbitrary masks, context parallelism), for kernels/ask.py --libraries te
    python benchmarks/gpu/te_selection.py compare SNAPSHOT.json ANSWERS.jsonl OUT_PREFIX
        runs the doctor's diagnosis for each workload on the device's own snapshot
        (`python -m doctor probe --format json` there) and writes OUT_PREFIX.json and .md

The device answers come from `get_attention_backend` with the real cuDNN; nothing here
needs a GPU. Agreement is counted on the selected backend and on each backend's
availability; each disagreement is listed with TE's own debug log for the workload.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

BASE: Dict[str, Any] = dict(dtype="bf16", head_dim_qk=128, head_dim_v=128, num_heads=32,
                            num_kv_heads=8, seq_len_q=4096, seq_len_kv=4096, batch_size=2,
                            mask="causal")

VARIATIONS: List[Dict[str, Any]] = [
    {},
    {"dtype": "fp16"}, {"dtype": "fp32"},
    {"head_dim_qk": 64, "head_dim_v": 64}, {"head_dim_qk": 80, "head_dim_v": 80},
    {"head_dim_qk": 96, "head_dim_v": 96}, {"head_dim_qk": 72, "head_dim_v": 72},
    {"head_dim_qk": 192, "head_dim_v": 192}, {"head_dim_qk": 256, "head_dim_v": 256},
    {"head_dim_qk": 320, "head_dim_v": 320}, {"head_dim_qk": 512, "head_dim_v": 512},
    {"head_dim_qk": 192, "head_dim_v": 128}, {"head_dim_qk": 192, "head_dim_v": 128, "num_kv_heads": 32},
    {"head_dim_qk": 128, "head_dim_v": 64}, {"head_dim_qk": 576, "head_dim_v": 512},
    {"num_heads": 16, "num_kv_heads": 16}, {"num_heads": 16, "num_kv_heads": 1},
    {"mask": "no_mask"}, {"mask": "causal_bottom_right"},
    {"mask": "causal", "seq_len_q": 128, "seq_len_kv": 384},
    {"mask": "causal_bottom_right", "seq_len_q": 128, "seq_len_kv": 384},
    {"mask": "no_mask", "seq_len_q": 128, "seq_len_kv": 384},
    {"mask": "causal_bottom_right", "seq_len_q": 1, "seq_len_kv": 4096, "training": False},
    {"mask": "padding_causal", "varlen": True, "qkv_format": "thd"},
    {"mask": "padding", "varlen": True, "qkv_format": "thd"},
    {"mask": "padding_causal", "varlen": True, "qkv_format": "thd", "head_dim_qk": 192, "head_dim_v": 128},
    {"mask": "padding_causal", "varlen": True, "qkv_format": "thd", "window_size": [128, 0]},
    {"mask": "padding_causal", "varlen": True, "qkv_format": "thd", "dropout": 0.1},
    {"window_size": [128, 0]}, {"window_size": [4095, 0]}, {"mask": "no_mask", "window_size": [128, 128]},
    {"window_size": [128, 0], "head_dim_qk": 256, "head_dim_v": 256},
    {"dropout": 0.1}, {"dropout": 0.1, "head_dim_qk": 256, "head_dim_v": 256},
    {"dropout": 0.1, "window_size": [128, 0]},
    {"softcap": 30.0}, {"softcap": 50.0, "head_dim_qk": 256, "head_dim_v": 256, "window_size": [4095, 0]},
    {"alibi": True}, {"alibi": True, "mask": "no_mask"},
    {"qkv_packed": True, "num_heads": 16, "num_kv_heads": 16},
    {"qkv_packed": True, "num_heads": 16, "num_kv_heads": 1, "dtype": "fp16", "head_dim_qk": 64,
     "head_dim_v": 64, "seq_len_q": 2048, "seq_len_kv": 2048, "batch_size": 1},
    {"qkv_format": "sbhd"}, {"qkv_format": "sbhd", "qkv_packed": True, "num_heads": 16, "num_kv_heads": 16},
    {"deterministic": True}, {"deterministic": True, "head_dim_qk": 256, "head_dim_v": 256},
    {"deterministic": True, "dropout": 0.1},
    {"training": False}, {"training": False, "head_dim_qk": 256, "head_dim_v": 256},
    {"dtype": "fp8"}, {"dtype": "fp8", "training": False},
    {"dtype": "fp8", "head_dim_qk": 192, "head_dim_v": 128}, {"dtype": "fp8", "mask": "no_mask"},
    {"seq_len_q": 32768, "seq_len_kv": 32768, "batch_size": 1}, {"seq_len_q": 512, "seq_len_kv": 512},
    {"seq_len_q": 100, "seq_len_kv": 100}, {"seq_len_q": 4095, "seq_len_kv": 4095},
    {"batch_size": 64, "seq_len_q": 512, "seq_len_kv": 512},
    {"cp_size": 2}, {"cp_size": 2, "mask": "causal_bottom_right"},
    {"cp_size": 2, "window_size": [128, 0]},
    {"dtype": "fp16", "head_dim_qk": 256, "head_dim_v": 256, "mask": "no_mask"},
    {"num_heads": 16, "num_kv_heads": 1, "head_dim_qk": 64, "head_dim_v": 64},
]


def _name(v: Dict[str, Any]) -> str:
    if not v:
        return "default"
    return ",".join(f"{k}={'x'.join(map(str, x)) if isinstance(x, list) else x}"
                    for k, x in v.items())


def workloads() -> List[Dict[str, Any]]:
    return [{"name": _name(v), **BASE, **v} for v in VARIATIONS]


# The factors SDPA's C++ filters read (sdp_utils.cpp): each draw takes one value of each.
MATRIX: Dict[str, List[Any]] = {
    "dtype": ["bf16", "bf16", "fp16", "fp32"],
    "heads": [(32, 32), (32, 8), (32, 1), (16, 16), (12, 4), (8, 2), (40, 8), (7, 7)],
    "head_dims": [(64, 64), (128, 128), (128, 128), (80, 80), (96, 96), (256, 256), (192, 128),
                  (192, 192), (72, 72), (100, 100), (8, 8), (16, 16), (40, 40), (112, 112),
                  (160, 160), (320, 320), (512, 512), (128, 64), (64, 128), (576, 512), (4, 4),
                  (24, 24), (200, 200), (264, 264), (136, 136)],
    "seqs": [(4096, 4096), (1024, 1024), (512, 512), (128, 128), (100, 100), (1, 1), (1, 4096),
             (17, 17), (4095, 4095), (2048, 1024), (128, 384), (8192, 8192)],
    "mask": ["no_mask", "causal", "causal", "arbitrary", "causal_bottom_right"],
    "window_size": [None, None, None, None, [128, 0]],
    "dropout": [0.0, 0.0, 0.1],
    "training": [True, True, False],
    "deterministic": [False, False, False, True],
    "batch_size": [1, 2, 8],
}


def _draws(factors: Dict[str, List[Any]], n: int, seed: int, prefix: str,
           shape: Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """`n` random workloads, one value of each factor per draw (heads, head dims and lengths
    come as pairs); `shape` adjusts a draw to what the library is asked, or drops it (None)."""
    import random

    rng = random.Random(seed)
    out: List[Dict[str, Any]] = []
    while len(out) < n:
        pick = {k: vals[rng.randrange(len(vals))] for k, vals in factors.items()}
        (h, hkv), (dqk, dv), (sq, skv) = pick.pop("heads"), pick.pop("head_dims"), pick.pop("seqs")
        w = shape(dict(BASE, num_heads=h, num_kv_heads=hkv, head_dim_qk=dqk, head_dim_v=dv,
                       seq_len_q=sq, seq_len_kv=skv, **pick))
        if w is not None:
            out.append({"name": f"{prefix}{len(out):04d}", **w})
    return out


def _sdpa_shape(w: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if w["mask"] == "causal_bottom_right" and w["seq_len_q"] != w["seq_len_kv"]:
        return None  # CausalBias's own dispatch, not _fused_sdp_choice (not_comparable)
    return w


def matrix(n: int, seed: int) -> List[Dict[str, Any]]:
    """`n` random workloads over MATRIX (names say the draw), for asking torch alone."""
    return _draws(MATRIX, n, seed, "m", _sdpa_shape)


# flash-attn 2's own arguments on top (benchmarks/gpu/fa2_ask.py calls its kernels)
FA2_MATRIX: Dict[str, List[Any]] = dict(
    MATRIX,
    mask=["no_mask", "causal", "causal"],
    window_size=[None, None, None, [128, 0], [128, 128]],
    softcap=[0.0, 0.0, 0.0, 30.0],
    alibi=[False, False, False, True],
    varlen=[False, False, False, True],
)


def _fa2_shape(w: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if w["varlen"]:
        w["qkv_format"] = "thd"
        w["mask"] = "padding_causal" if w["mask"] == "causal" else "padding"
    return w


def fa2_matrix(n: int, seed: int) -> List[Dict[str, Any]]:
    """`n` random workloads over FA2_MATRIX, for asking flash-attn 2 (fa2_ask.py)."""
    return _draws(FA2_MATRIX, n, seed, "f", _fa2_shape)


# TransformerEngine's DotProductAttention arguments (kernels/ask.py te_choice asks them)
TE_MATRIX: Dict[str, List[Any]] = {
    "dtype": ["bf16", "bf16", "fp16", "fp32", "fp8"],
    "heads": [(32, 32), (32, 8), (32, 1), (16, 4), (12, 3)],
    "head_dims": [(128, 128), (128, 128), (64, 64), (96, 96), (80, 80), (256, 256), (192, 128),
                  (192, 192), (72, 72), (100, 100), (320, 320), (512, 512), (128, 64), (576, 512),
                  (160, 160)],
    "seqs": [(4096, 4096), (2048, 2048), (1000, 1000), (512, 512), (100, 100), (128, 384),
             (2048, 4096), (4096, 2048), (1, 4096), (4095, 4095)],
    "mask": ["no_mask", "causal", "causal", "causal_bottom_right", "padding", "padding_causal",
             "padding_causal_bottom_right", "arbitrary"],
    "window_size": [None, None, None, [128, 0], [4095, 0], [128, 128]],
    "dropout": [0.0, 0.0, 0.1],
    "training": [True, True, False],
    "deterministic": [False, False, False, True],
    "qkv_format": ["bshd", "bshd", "sbhd", "thd"],
    "qkv_packed": [False, False, False, True],
    "softcap": [0.0, 0.0, 0.0, 0.0, 0.0, 30.0],
    "alibi": [False, False, False, False, False, True],
    "cp": [(1, None)] * 6 + [(2, "p2p"), (2, "a2a"), (2, "all_gather")],
    "batch_size": [1, 2, 8],
}


def _te_shape(w: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    cp_size, cp_comm = w.pop("cp")
    if w["qkv_format"] == "thd":  # packed sequences: padding masks, as DotProductAttention sees them
        w["varlen"] = True
        if not w["mask"].startswith("padding"):
            if w["mask"] == "arbitrary":
                return None
            w["mask"] = "padding" if w["mask"] == "no_mask" else "padding_" + w["mask"]
    if cp_size > 1:
        w.update(cp_size=cp_size, cp_comm_type=cp_comm)
    return w


def te_matrix(n: int, seed: int) -> List[Dict[str, Any]]:
    """`n` random workloads over TE_MATRIX, for asking TransformerEngine (kernels/ask.py)."""
    return _draws(TE_MATRIX, n, seed, "t", _te_shape)


def _workload(d: Dict[str, Any]) -> Any:
    from doctor.model import ContextParallel, Workload

    names = {f.name for f in fields(Workload)}
    kw = {k: v for k, v in d.items() if k in names}
    if kw.pop("fp8", False):  # FP8 attention: the doctor's workload says dtype fp8
        kw["dtype"] = "fp8"
    if kw.get("window_size") is not None:
        kw["window_size"] = tuple(kw["window_size"])
    w = Workload(**kw)
    if int(d.get("cp_size") or 1) > 1:
        w = replace(w, context_parallel=replace(ContextParallel(), size=int(d["cp_size"]),
                                                comm_type=str(d.get("cp_comm_type") or "p2p"), impl="te"))
    return w


def not_comparable(library: str, w: Dict[str, Any]) -> Optional[str]:
    """Workloads where the library question cannot stand for the workload's real call path
    (the row is listed, and left out of the agreement figure)."""
    if library == "transformer-engine":
        if w.get("qkv_packed") and w.get("head_dim_qk") != w.get("head_dim_v"):
            return ("k and v with different head dims cannot share one packed tensor; the asked "
                    "layout (*_2hd) does not exist for this workload")
        return None
    if library != "torch":
        return None
    if w.get("varlen") or w.get("qkv_format") == "thd":
        return "SDPA runs packed sequences as nested tensors; _fused_sdp_choice was asked on a dense shape"
    if str(w.get("mask", "")).endswith("bottom_right") and w.get("seq_len_q") != w.get("seq_len_kv"):
        return ("bottom-right causal with seq_q != seq_kv goes through CausalBias's own dispatch, "
                "not _fused_sdp_choice (asked with an explicit mask)")
    if w.get("dtype") == "fp8" or w.get("fp8"):
        return "SDPA has no FP8 attention"
    return None


def compare(snapshot: Path, answers: Path, prefix: Path) -> Dict[str, Any]:
    from doctor.app import probe_snapshot
    from doctor.verify.asked import compare as compare_one
    from doctor.snapshot import facts_from_snapshot
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue([])
    facts = facts_from_snapshot(probe_snapshot(env_file=snapshot), source=str(snapshot))
    rows = []
    for line in answers.read_text(encoding="utf-8").splitlines():
        if not line.strip().startswith("{"):
            continue
        item = json.loads(line)
        w = _workload(item["workload"])
        d = diagnose(cat, facts, w)
        for ans in item["answers"]:
            fw = {"transformer-engine": "transformer-engine", "torch": "torch-sdpa",
                  "flash-attn": "flash-attn"}[ans["library"]]
            mine = [b for b in d.backends if b.framework == fw]
            predicted = next((b.id for b in mine if b.selected), None)
            avail = {b.id: b.available for b in mine}
            c = compare_one(ans, predicted, avail)
            why_not = not_comparable(ans["library"], item["workload"])
            if why_not and c["verdict"] != "not_asked":
                c = dict(c, verdict="not_comparable", detail=why_not)
            rows.append({
                "name": item["name"], "library": ans["library"], "verdict": c["verdict"],
                "library_pick": c.get("library"), "doctor_pick": c.get("doctor"),
                "mismatches": c.get("mismatches", []), "detail": c.get("detail"),
                "library_available": ans.get("available"), "doctor_available": avail,
                "doctor_reasons": {b.id: list(b.reasons) for b in mine if b.reasons},
                "fused_sub_backend": ans.get("fused_sub_backend"),
                "library_log": ans.get("log", [])[-12:] if c["verdict"] != "confirmed"
                or c["mismatches"] else [],
                "library_reasons": ans.get("reasons"),
            })
    out: Dict[str, Any] = {"snapshot": str(snapshot), "answers": str(answers), "libraries": {}}
    for lib in sorted({r["library"] for r in rows}):
        mine = [r for r in rows if r["library"] == lib
                and r["verdict"] not in ("not_asked", "not_comparable")]
        pairs = sum(len(r["library_available"] or {}) for r in mine)
        bad_pairs = sum(len(r["mismatches"]) for r in mine)
        out["libraries"][lib] = {
            "workloads": len(mine),
            "selection_agree": sum(r["verdict"] == "confirmed" for r in mine),
            "availability_pairs": pairs, "availability_agree": pairs - bad_pairs,
            "not_asked": sum(r["verdict"] == "not_asked" for r in rows if r["library"] == lib),
            "not_comparable": sum(r["verdict"] == "not_comparable" for r in rows if r["library"] == lib),
        }
    out["rows"] = rows
    prefix.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    md = [f"# Library selection vs doctor ({snapshot.name})", ""]
    for lib, s in out["libraries"].items():
        md.append(f"- {lib}: selection {s['selection_agree']}/{s['workloads']}, availability "
                  f"{s['availability_agree']}/{s['availability_pairs']}"
                  + (f", {s['not_asked']} not asked" if s["not_asked"] else ""))
    md += ["", "| workload | library | library picks | doctor | verdict | availability mismatches |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        mm = "; ".join(f"{m['backend']}: lib {m['library']} / doctor {m['doctor']}" for m in r["mismatches"])
        md.append(f"| `{r['name']}` | {r['library']} | {r['library_pick']} | {r['doctor_pick']} | "
                  f"{r['verdict']} | {mm} |")
    prefix.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return out


def main(argv: List[str]) -> int:
    if argv[:1] == ["workloads"]:
        Path(argv[1]).write_text(json.dumps({"workloads": workloads()}, indent=1) + "\n")
        print(f"{len(workloads())} workloads -> {argv[1]}")
        return 0
    draws = {"matrix": matrix, "fa2-matrix": fa2_matrix, "te-matrix": te_matrix}
    if argv[:1] and argv[0] in draws:
        ws = draws[argv[0]](int(argv[1]), int(argv[2]))
        Path(argv[3]).write_text(json.dumps({"workloads": ws}, indent=1) + "\n")
        print(f"{len(ws)} workloads -> {argv[3]}")
        return 0
    if argv[:1] == ["compare"]:
        out = compare(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        print(json.dumps(out["libraries"]))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
