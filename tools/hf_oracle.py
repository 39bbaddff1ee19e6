"""transformers' own attention-implementation check, run on a CPU, as an oracle for the doctor.

    python tools/hf_oracle.py --out FILE.json [--cases-out FILE.jsonl] [--versions 4.44.2,...]
    python tools/hf_oracle.py --replay FILE.jsonl --out FILE.json      (offline, seconds)

Developer tool; not part of the installed package. For each transformers release it installs
the release and its dependencies (not torch) with `pip install --target` into a folder of its
own under $XDG_CACHE_HOME/attn-doctor/hf-oracle, then runs a worker process with only that
folder on PYTHONPATH and the torch of the interpreter given by --python. The worker builds a
tiny config for every model_type the catalogue names and calls
`AutoModel.from_config(cfg, attn_implementation=impl)` for each implementation, on the meta
device, twice:

  as-is        this machine as it is: no GPU, no flash-attn, no FA3.
  kernels      flash-attn 2.8.3 and FA3 made to look installed (stub packages with metadata)
               and torch.cuda made to report one sm90 GPU, so that the package and GPU checks
               pass and only the model's own flag check (`_supports_sdpa`, `_supports_flash_attn*`,
               `_supports_flex_attn`) can refuse.

Every answer is classified by which check fired: `model` (the class does not declare the
implementation), `unknown` (the release has no such implementation), `package` (the kernel
package is missing), `gpu` (no CUDA device), `other`, or `ok` (the model was built; the
implementation it ended up with is recorded too). The "kernels" answer is the oracle for the
doctor's `path.model_supports` (doctor.releases.model_support.model_supports), which is read
from the same flags statically by tools/hf_attention_facts.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VERSIONS = ["4.36.2", "4.40.2", "4.44.2", "4.48.0", "4.51.3", "4.53.0", "4.57.1", "5.0.0", "5.3.0", "5.5.0", "5.10.4", "5.23.0"]
IMPLS = ["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
# model_type values the catalogue names (grep rules/ for model_type) plus the common families
# the issue lists. Families a release does not have are recorded as `absent`.
MODEL_TYPES = [
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "gpt2", "gpt_neox", "phi3", "deepseek_v3", "gpt_oss", "qwen2_vl", "qwen2_5_vl", "glm4v", "qwen3_5",
    "qwen3_5_moe", "qwen2_5_omni", "internvl_chat", "deepseek_vl_v2",
    # Families that kept a per-model attention-class dict after the merged flash flag (4.54):
    "falcon", "gptj", "gpt_neo", "olmoe", "phimoe", "dbrx",
]


# ---------------------------------------------------------------------------------------------
# The worker: runs inside one release's environment (PYTHONPATH = that release's folder only).
# It must not import anything from this repository.
# ---------------------------------------------------------------------------------------------

TINY = {
    "num_hidden_layers": 1, "num_layers": 1, "n_layer": 1, "hidden_size": 64, "n_embd": 64, "d_model": 64,
    "num_attention_heads": 4, "n_head": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "vocab_size": 128,
    "max_position_embeddings": 128, "n_positions": 128, "num_local_experts": 4, "num_experts": 4,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 0,
    "n_group": 1, "topk_group": 1, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8, "v_head_dim": 16, "depth": 1, "embed_dim": 64, "num_heads": 4,
    "out_hidden_size": 64, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_layers": 1, "decoder_layers": 1, "layer_types": None,
}


def _shrink(cfg: Any, depth: int = 0) -> None:
    """Set the size fields a config has to tiny values, recursing into sub-configs."""
    if depth > 3:
        return
    for key, value in TINY.items():
        if key == "layer_types":
            continue
        if key in getattr(cfg, "__dict__", {}):
            try:
                setattr(cfg, key, value)
            except Exception:  # noqa: BLE001 - some fields are read-only properties
                pass
    vocab = getattr(cfg, "vocab_size", None)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        tok = getattr(cfg, "__dict__", {}).get(key)
        if isinstance(vocab, int) and isinstance(tok, int) and tok >= vocab:
            setattr(cfg, key, 0)
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[:1]
    for key, value in list(getattr(cfg, "__dict__", {}).items()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _shrink(value, depth + 1)


STUB_FUNCS = '''
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    raise RuntimeError("stub")

def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    raise RuntimeError("stub")

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def _stub(*a, **k):
        raise RuntimeError("stub")
    return _stub
'''


def _make_stubs(root: Path) -> None:
    """flash-attn 2.8.3 and FA3 that import and report versions, and run nothing. Submodules
    not written here (flash_attn.layers.rotary, flash_attn.ops.triton...) come from _StubFinder."""
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    (root / "flash_attn").mkdir(parents=True, exist_ok=True)
    (root / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.3"\n' + STUB_FUNCS)
    for sub in ("bert_padding", "flash_attn_interface"):
        (root / "flash_attn" / f"{sub}.py").write_text(STUB_FUNCS)
    (root / "flash_attn_interface.py").write_text(STUB_FUNCS)
    (root / "flash_attn_3").mkdir(exist_ok=True)
    (root / "flash_attn_3" / "__init__.py").write_text(STUB_FUNCS)
    for dist, version, top in (("flash_attn", "2.8.3", "flash_attn"), ("flash_attn_3", "3.0.0b1", "flash_attn_interface\nflash_attn_3")):
        info = root / f"{dist}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
        (info / "top_level.txt").write_text(top + "\n")
        (info / "RECORD").write_text("")


class _StubFinder:
    """Any flash_attn.* submodule that is not on disk imports as a stub package."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.util

        if name.startswith("flash_attn.") or name.startswith("flash_attn_3."):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        exec(STUB_FUNCS, module.__dict__)  # noqa: S102 - our own stub text
        module.__path__ = []


def _fake_gpu() -> None:
    import torch

    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    torch.cuda.device_count = lambda: 1  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # type: ignore[assignment]
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H100 80GB HBM3 (faked)"  # type: ignore[assignment]
    torch.cuda.current_device = lambda: 0  # type: ignore[assignment]
    torch.version.cuda = "12.8"  # type: ignore[misc]  # the FA2 version check reads it


def classify(exc: BaseException) -> str:
    """Which of transformers' checks raised (read from the release's code: the messages of
    `_check_and_enable_*` in 4.x and `_*_can_dispatch` / `_check_and_adjust_attn_implementation`
    in 4.48+ / 5.x)."""
    msg = str(exc).lower()
    if isinstance(exc, KeyError) and any(k in msg for k in ("flash_attention", "sdpa", "flex_attention")):
        return "model_class"  # the flag check passed, but the model's own ATTENTION_CLASSES dict has no entry
    if "`kernels`" in msg and "install" in msg:
        return "hub_kernel"  # the model redirects the request to a hub kernel, which needs `kernels`
    if "only possible arguments" in msg or ("is not supported" in msg and "specified" in msg) or "not a valid attention" in msg \
            or "attention implementations" in msg and "available" in msg and "not" in msg and "does not support" not in msg:
        return "unknown"
    if "does not support" in msg or "not support an attention implementation" in msg or "doesn't support" in msg:
        return "model"
    if "not installed" in msg or "not available" in msg and "package" in msg or "seems to be not installed" in msg \
            or isinstance(exc, ImportError) or "flash_attn" in msg and "not" in msg and "install" in msg:
        return "package"
    if "gpu" in msg or "cuda" in msg:
        return "gpu"
    return "other"


def _build(transformers: Any, auto_model: Any, cfg: Any, impl: str) -> Any:
    """AutoModel.from_config in half precision (4.36-4.39 refuse FlashAttention-2 in fp32 at
    load time); for families AutoModel does not map (qwen2_5_omni), the first class any auto
    mapping names for the model_type."""
    import torch

    major = int(transformers.__version__.split(".")[0])
    dtype_kw = {"dtype": torch.bfloat16} if major >= 5 else {"torch_dtype": torch.bfloat16}
    try:
        return auto_model.from_config(cfg, attn_implementation=impl, **dtype_kw)
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise
    from transformers.models.auto import modeling_auto

    for name in sorted(dir(modeling_auto)):
        table = getattr(modeling_auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(table, dict) and isinstance(table.get(cfg.model_type), str):
            cls = getattr(transformers, table[cfg.model_type], None)
            if cls is not None:
                return cls._from_config(cfg, attn_implementation=impl, **dtype_kw)
    raise ValueError(f"Unrecognized configuration class for {cfg.model_type}: no auto mapping names a class")


def worker(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    import contextlib
    import io
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    # An editable install of this repository puts its root on sys.path, and its `kernels/`
    # folder then imports as a namespace package that transformers 5.x takes for the hub
    # `kernels` library. Keep the release's environment to itself.
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "doctor" / "__init__.py").exists()]
    mode = spec["mode"]
    if mode == "kernels":
        stubs = Path(spec["stubs"])
        _make_stubs(stubs)
        sys.path.insert(0, str(stubs))
        sys.meta_path.append(_StubFinder())
        _fake_gpu()
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel

    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    out = []
    for model_type in spec["model_types"]:
        try:
            cfg0 = AutoConfig.for_model(model_type)
        except Exception as exc:  # noqa: BLE001 - the release lacks this family
            for impl in spec["impls"]:
                out.append({"model_type": model_type, "impl": impl, "mode": mode, "result": "absent", "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        for impl in spec["impls"]:
            cfg = AutoConfig.for_model(model_type)
            _shrink(cfg)
            rec: Dict[str, Any] = {"model_type": model_type, "impl": impl, "mode": mode}
            sink = io.StringIO()
            try:
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), torch.device("meta"):
                    model = _build(transformers, AutoModel, cfg, impl)
                rec["result"] = "ok"
                rec["effective"] = getattr(model.config, "_attn_implementation", None)
                rec["class"] = type(model).__name__
            except BaseException as exc:  # noqa: BLE001 - the answer is the exception
                if isinstance(exc, KeyboardInterrupt):
                    raise
                rec["result"] = classify(exc)
                rec["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            out.append(rec)
        del cfg0
    return out


# ---------------------------------------------------------------------------------------------
# The driver: installs releases, runs workers, scores against the doctor.
# ---------------------------------------------------------------------------------------------


def cache_dir(explicit: Optional[str]) -> Path:
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attn-doctor" / "hf-oracle"


def install(version: str, cache: Path, python: str) -> Tuple[Optional[Path], Optional[str]]:
    """The release's folder, or None and why it could not be installed."""
    target = cache / f"transformers-{version}"
    if (target / ".complete").exists():
        return target, None
    proc = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "--target", str(target), f"transformers=={version}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        return None, f"pip install --target failed: {tail}"
    if (target / "torch").exists():
        return None, "its dependencies pulled a torch of their own"
    (target / ".complete").write_text("")
    return target, None


def run_release(version: str, target: Path, python: str, mode: str, cache: Path) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    spec = {"mode": mode, "model_types": MODEL_TYPES, "impls": IMPLS, "stubs": str(cache / "stubs")}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(target)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    proc = subprocess.run([python, str(Path(__file__).resolve()), "--worker", json.dumps(spec)], capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " ".join(proc.stderr.split())[-400:]
        return [], f"worker failed (exit {proc.returncode}): {tail}"
    return [json.loads(ln) for ln in lines], None


def oracle_verdict(kernels: Dict[str, Any]) -> Optional[bool]:
    """Does the model accept the implementation, by transformers' own check (kernels present,
    GPU present)? None when the answer says nothing about the model (absent family, other error)."""
    result = kernels["result"]
    if result == "ok":
        return True
    if result in ("model", "unknown", "model_class"):
        return False
    if result == "hub_kernel":
        return True  # accepted and redirected to a hub kernel (see docs/hf-oracle/disagreements.md)
    return None


def doctor_verdict(version: str, model_type: str, impl: str) -> Optional[bool]:
    try:
        from doctor.releases.model_support import model_supports
    except ImportError:  # run from a checkout without PYTHONPATH: use this repository's doctor
        sys.path.insert(0, str(REPO))
        from doctor.releases.model_support import model_supports

    return model_supports(version, model_type, impl)


def score(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """records: one per (version, model_type, impl) with `as_is` and `kernels` answers."""
    cases = agree = 0
    by_version: Dict[str, Dict[str, int]] = {}
    disagreements: List[Dict[str, Any]] = []
    unmodelled: List[Dict[str, Any]] = []
    inconclusive: List[Dict[str, Any]] = []
    for rec in records:
        v, mt, impl = rec["version"], rec["model_type"], rec["impl"]
        truth = oracle_verdict(rec["kernels"])
        absent = rec["kernels"]["result"] == "absent"
        doc = doctor_verdict(v, mt, impl)
        row = by_version.setdefault(v, {"cases": 0, "agree": 0, "absent": 0, "unmodelled": 0, "inconclusive": 0})
        if absent:
            # The release has no such family: the doctor must not claim anything either.
            row["absent"] += 1
            if doc is None:
                continue
            truth = None
        if truth is None and not absent:
            row["inconclusive"] += 1
            inconclusive.append({"version": v, "model_type": mt, "impl": impl, "doctor": doc, "error": rec["kernels"].get("error")})
            continue
        cases += 1
        row["cases"] += 1
        if doc is None:
            row["unmodelled"] += 1
            unmodelled.append({"version": v, "model_type": mt, "impl": impl, "transformers": truth})
            continue
        if doc == truth:
            agree += 1
            row["agree"] += 1
        else:
            disagreements.append({"version": v, "model_type": mt, "impl": impl, "kind": "absent" if absent else "verdict", "doctor": doc, "transformers": truth,
                                  "as_is": rec["as_is"], "kernels": rec["kernels"]})
    return {"cases": cases, "agree": agree, "by_version": by_version, "disagreements": disagreements, "unmodelled": unmodelled,
            "inconclusive": inconclusive}


def check_order(records: List[Dict[str, Any]]) -> Dict[str, Dict[str, int]]:
    """Per release: for implementations the model does not declare, which check fired on this
    CPU machine (model flag first, or the package / GPU check first)."""
    out: Dict[str, Dict[str, int]] = {}
    for rec in records:
        if rec["kernels"]["result"] != "model":
            continue
        key = f"{rec['version']} {rec['impl']}"
        row = out.setdefault(key, {})
        row[rec["as_is"]["result"]] = row.get(rec["as_is"]["result"], 0) + 1
    return dict(sorted(out.items()))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where to write the JSON summary")
    ap.add_argument("--cases-out", help="also write every raw answer (JSON lines)")
    ap.add_argument("--replay", help="score the answers recorded in a --cases-out file instead of running transformers")
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--cache", help="install folders (default: $XDG_CACHE_HOME/attn-doctor/hf-oracle)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch for the workers")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        for rec in worker(json.loads(args.worker)):
            print(json.dumps(rec), flush=True)
        return 0
    if not args.out:
        ap.error("--out is required")
    skipped: List[Dict[str, str]] = []
    releases: List[str] = []
    if args.replay:
        records, skipped, releases = load_cases(Path(args.replay))
    else:
        cache = cache_dir(args.cache)
        cache.mkdir(parents=True, exist_ok=True)
        records = []
        for version in args.versions.split(","):
            t0 = time.time()
            target, why = install(version, cache, args.python)
            if target is None:
                skipped.append({"version": version, "reason": why or "?"})
                print(f"{version}: skipped ({why})", file=sys.stderr)
                continue
            answers: Dict[str, Dict[Tuple[str, str], Dict[str, Any]]] = {}
            for mode in ("as-is", "kernels"):
                got, why = run_release(version, target, args.python, mode, cache)
                if why:
                    break
                answers[mode] = {(r["model_type"], r["impl"]): r for r in got}
            if why:
                skipped.append({"version": version, "reason": why})
                print(f"{version}: skipped ({why})", file=sys.stderr)
                continue
            releases.append(version)
            for key, kern in answers["kernels"].items():
                records.append({"version": version, "model_type": key[0], "impl": key[1], "as_is": answers["as-is"][key], "kernels": kern})
            print(f"{version}: {len(answers['kernels'])} answers in {time.time() - t0:.0f}s", file=sys.stderr)
        if args.cases_out:
            with open(args.cases_out, "w", encoding="utf-8") as fh:
                fh.write(json.dumps({"releases": releases, "skipped": skipped}) + "\n")
                for rec in records:
                    fh.write(json.dumps(rec, sort_keys=True) + "\n")
    result = score(records)
    result["releases"] = releases
    result["skipped"] = skipped
    result["check_order"] = check_order(records)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    n, m = result["cases"], result["agree"]
    print(f"{m}/{n} agree ({100.0 * m / max(n, 1):.1f}%), {len(result['unmodelled'])} unmodelled, "
          f"{len(result['disagreements'])} disagreements, {len(result['inconclusive'])} inconclusive, "
          f"{len(skipped)} releases skipped", file=sys.stderr)
    return 0


def load_cases(path: Path) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]], List[str]]:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    head = json.loads(lines[0])
    return [json.loads(ln) for ln in lines[1:]], head.get("skipped", []), head.get("releases", [])


if __name__ == "__main__":
    sys.exit(main())
