"""Loaded facts: one child Python imports torch and the attention libraries and reports back.

Importing torch costs a second or more and can crash or hang, so it never happens in the
attn-doctor process. The child runs `child_script.py` under a timeout; whatever it did not
report (it crashed, hung, or printed garbage) becomes an unknown fact with the reason and the
end of its stderr, never an exception.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.probe.decode import TorchContext, diagnose
from doctor.probe.envvars import scrub
from doctor.probe.sources import RunResult, Sources
from doctor.probe.targets import IMPORT_DISTS, IMPORTS, TORCH_LOADED_FACTS as TORCH_FACTS

MARKER = "@@attn-doctor@@ "
_RUNTIME_IN_ERROR = re.compile(r"found runtime version \((\d+), (\d+), (\d+)\)")
SCRIPT = Path(__file__).with_name("child_script.py")


@dataclass(frozen=True)
class ImportResult:
    status: str  # ok | error | missing | timeout
    error: Optional[str] = None
    cause: Optional[str] = None
    fix: Optional[str] = None


@dataclass(frozen=True)
class LoadedTorch:
    version: Optional[str] = None
    cuda: Optional[str] = None
    hip: Optional[str] = None
    git_version: Optional[str] = None
    cxx11_abi: Optional[bool] = None
    cuda_available: Optional[bool] = None
    device_count: Optional[int] = None
    arch_list: Optional[Tuple[str, ...]] = None
    cudnn_version: Optional[str] = None  # torch.backends.cudnn.version(): 9.1.0
    cudnn_runtime: Optional[str] = None  # cudnnGetVersion() of the libcudnn mapped in the child
    cudnn_path: Optional[str] = None  # the file cudnnGetVersion resolves to (dladdr)
    cudnn_mapped: Tuple[str, ...] = ()  # every libcudnn*.so* (main library and its parts) mapped
    cudnn_error: Optional[str] = None  # torch refused the cuDNN it found (version incompatibility)
    cudart_path: Optional[str] = None


@dataclass(frozen=True)
class Loaded:
    torch: LoadedTorch
    imports: Mapping[str, ImportResult]
    unknown: Mapping[str, str]  # fact path -> reason
    python: str
    seconds: float
    cached_at: Optional[str] = None  # set when the result came from the cache
    records: Tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    complete: bool = False  # the child reached its last step


def decode_cudnn_version(value: Optional[int]) -> Optional[str]:
    """torch.backends.cudnn.version(): 90100 -> 9.1.0 (9.x), 8902 -> 8.9.2 (8.x and older)."""
    if value is None:
        return None
    v = int(value)
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def owner_python(torch_site_dir: Optional[str], default: str = sys.executable) -> str:
    """The interpreter that imports torch from `torch_site_dir` (this one, if it is on our path)."""
    if torch_site_dir is None:
        return default
    here = {os.path.abspath(p or ".") for p in sys.path}
    if os.path.abspath(torch_site_dir) in here:
        return default
    # <prefix>/lib/pythonX.Y/site-packages -> <prefix>/bin/python
    parts = Path(torch_site_dir).resolve().parts
    if len(parts) >= 4 and parts[-1] in ("site-packages", "dist-packages"):
        prefix = Path(*parts[:-3])
        for name in (parts[-2], "python3", "python"):
            candidate = prefix / "bin" / name
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return default


def command(python: str, names: Sequence[str]) -> List[str]:
    return [python, "-c", SCRIPT.read_text(encoding="utf-8"), *names]


def parse_records(stdout: str) -> List[Dict[str, Any]]:
    records = []
    for line in stdout.splitlines():
        if not line.startswith(MARKER):
            continue
        try:
            rec = json.loads(line[len(MARKER):])
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return scrub(" | ".join(kept))[-1200:]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _failure(res: RunResult, in_progress: Optional[str], timeout: float) -> str:
    if in_progress == "cuda":
        where = " while asking torch.cuda about the GPUs"
    else:
        where = f" while importing {in_progress}" if in_progress else ""
    if res.error:
        return f"could not start the child python: {res.error}"
    if res.timed_out:
        return f"the child python did not finish within {timeout:g} s{where}"
    if res.returncode is not None and res.returncode < 0:
        why = f"the child python was killed by {_signal_name(res.returncode)}{where}"
    else:
        why = f"the child python exited with code {res.returncode}{where}"
    tail = _tail(res.stderr)
    return f"{why}; stderr: {tail}" if tail else why


def _plain(facts: Mapping[str, Any], key: str) -> Any:
    entry = facts.get(key)
    return entry.get("value") if isinstance(entry, Mapping) else None


def _value(facts: Mapping[str, Any], key: str, unknown: Dict[str, str], path: str, what: str) -> Any:
    entry = facts.get(key)
    if not isinstance(entry, Mapping):
        unknown[path] = "the child python did not report it"
        return None
    if "error" in entry:
        unknown[path] = f"{what} raised {scrub(str(entry['error']))}"
        return None
    return entry.get("value")


@dataclass(frozen=True)
class _Progress:
    done: bool  # the child reached its last step
    in_progress: Optional[str]  # the step it had begun but not finished
    stopped: Optional[str]  # why it stopped early (None when done)


def _progress(records: Sequence[Mapping[str, Any]], res: Optional[RunResult], timeout: float) -> _Progress:
    steps = {r.get("step") for r in records}
    done = "done" in steps
    finished = {str(r.get("name")) for r in records if r.get("step") == "import"}
    finished |= {name for name, step in (("torch", "torch_import"), ("cuda", "cuda")) if step in steps}
    begun = [r.get("name") for r in records if r.get("step") == "begin"]
    in_progress = next((str(b) for b in reversed(begun) if b not in finished), None)
    stopped = None
    if not done:
        if res is None:
            stopped = "the child python stopped early"
        elif res.ok and not records:
            stopped = "the child python printed no result: " + (_tail(res.stdout) or "empty output")
        else:
            stopped = _failure(res, in_progress, timeout)
    return _Progress(done, in_progress, stopped)


def _cudnn(facts: Mapping[str, Any], unknown: Dict[str, str]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(torch's cuDNN version, the version of the cuDNN torch binds to, torch's refusal)."""
    torch_entry = facts.get("cudnn_version_int")
    cudnn = runtime = error = None
    if isinstance(torch_entry, Mapping) and "error" in torch_entry:
        error = scrub(str(torch_entry["error"]))
        unknown["torch.cudnn_version"] = f"torch.backends.cudnn.version() raised {error}"
    else:
        raw = _value(facts, "cudnn_version_int", unknown, "torch.cudnn_version", "torch.backends.cudnn.version()")
        try:
            cudnn = decode_cudnn_version(raw)
        except (TypeError, ValueError):
            unknown["torch.cudnn_version"] = f"unexpected cuDNN version {raw!r}"
    in_use = _plain(facts, "cudnn_in_use")
    try:
        runtime = decode_cudnn_version(in_use.get("version")) if isinstance(in_use, Mapping) else None
    except (TypeError, ValueError):
        runtime = None
    if runtime is None and error:
        m = _RUNTIME_IN_ERROR.search(error)
        runtime = ".".join(m.groups()) if m else None
    if cudnn is None and runtime is None and "torch.cudnn_version" in unknown:
        unknown["cudnn.loaded"] = unknown["torch.cudnn_version"]
    return cudnn, runtime, error


def _cudnn_path(facts: Mapping[str, Any]) -> Optional[str]:
    in_use = _plain(facts, "cudnn_in_use")
    if isinstance(in_use, Mapping) and in_use.get("path"):
        return str(in_use["path"])
    mains = [p for p in _plain(facts, "cudnn_mapped") or [] if os.path.basename(str(p)).startswith("libcudnn.so")]
    return str(mains[0]) if len(mains) == 1 else None


def _torch_facts(records: Sequence[Mapping[str, Any]], progress: _Progress, unknown: Dict[str, str]) -> LoadedTorch:
    facts = next((r for r in records if r.get("step") == "torch"), {}).get("facts") or {}
    cuda_rec = next((r for r in records if r.get("step") == "cuda"), None)
    cudnn, runtime, cudnn_error = _cudnn(facts, unknown)
    abi = _value(facts, "cxx11_abi", unknown, "torch.cxx11_abi", "torch._C._GLIBCXX_USE_CXX11_ABI")
    avail = count = arch = None
    if cuda_rec is None:
        for fact in ("cuda_available", "device_count", "arch_list"):
            unknown[f"torch.{fact}"] = progress.stopped or "the child python did not report it"
    else:
        cuda = cuda_rec.get("facts") or {}
        avail = _value(cuda, "cuda_available", unknown, "torch.cuda_available", "torch.cuda.is_available()")
        count = _value(cuda, "device_count", unknown, "torch.device_count", "torch.cuda.device_count()")
        arch = _value(cuda, "arch_list", unknown, "torch.arch_list", "torch.cuda.get_arch_list()")
    return LoadedTorch(
        version=_plain(facts, "version"),
        cuda=_plain(facts, "cuda"),
        hip=_plain(facts, "hip"),
        git_version=_plain(facts, "git_version"),
        cxx11_abi=abi if isinstance(abi, bool) else None,
        cuda_available=avail if isinstance(avail, bool) else None,
        device_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        arch_list=tuple(str(a) for a in arch) if isinstance(arch, list) else None,
        cudnn_version=cudnn,
        cudnn_runtime=runtime,
        cudnn_path=_cudnn_path(facts),
        cudnn_mapped=tuple(str(p) for p in _plain(facts, "cudnn_mapped") or ()),
        cudnn_error=cudnn_error,
        cudart_path=_plain(facts, "cudart_path"),
    )


def _import_result(
    name: str, result: Mapping[str, Any], torch: LoadedTorch, py_tag: Optional[str], versions: Mapping[str, str]
) -> ImportResult:
    status = str(result.get("status", "error"))
    if status in ("ok", "missing"):
        return ImportResult(status)
    error = scrub(str(result.get("error") or "")) or None
    if error is None:
        return ImportResult(status)
    ctx = TorchContext(
        version=torch.version,
        cuda=torch.cuda,
        cxx11_abi=torch.cxx11_abi,
        python_tag=py_tag,
        package_version=next((versions[d] for d in IMPORT_DISTS.get(name, ()) if d in versions), None),
    )
    diag = diagnose(name, error, ctx)
    return ImportResult(status, error, diag.cause if diag else None, diag.fix if diag else None)


def interpret(
    records: Sequence[Mapping[str, Any]],
    res: Optional[RunResult],
    *,
    python: str,
    timeout: float,
    versions: Mapping[str, str],
    seconds: float = 0.0,
    names: Sequence[str] = IMPORTS,
    cached_at: Optional[str] = None,
) -> Loaded:
    """Loaded facts from the child's records; `res` explains what is missing when it stopped early."""
    progress = _progress(records, res, timeout)
    unknown: Dict[str, str] = {}
    imports: Dict[str, ImportResult] = {}
    torch_import = next((r for r in records if r.get("step") == "torch_import"), None)
    if torch_import is None or torch_import.get("status") != "ok":
        if torch_import is not None:
            err = scrub(str(torch_import.get("error", "")))
            diag = diagnose("torch", err, TorchContext())
            reason = f"import torch failed: {err}"
            if diag:
                reason += f" (cause: {diag.cause}; fix: {diag.fix})"
        else:
            reason = progress.stopped or "the child python did not import torch"
        for fact in TORCH_FACTS:
            unknown[f"torch.{fact}"] = reason
        unknown["cudnn.loaded"] = reason
        for name in names:
            unknown[f"imports.{name}"] = f"not tried: {reason}"
        return Loaded(LoadedTorch(), imports, unknown, python, seconds, cached_at, tuple(records), progress.done)

    torch = _torch_facts(records, progress, unknown)
    start = next((r for r in records if r.get("step") == "start"), {})
    py_tag = "cp" + "".join(str(start["python"]).split(".")[:2]) if start.get("python") else None
    for name in names:
        rec = next((r for r in records if r.get("step") == "import" and r.get("name") == name), None)
        if rec is not None:
            imports[name] = _import_result(name, rec.get("result") or {}, torch, py_tag, versions)
        elif name == progress.in_progress and res is not None and res.timed_out:
            imports[name] = ImportResult("timeout", f"import did not finish within {timeout:g} s")
        elif name == progress.in_progress:
            imports[name] = ImportResult("error", progress.stopped)
        else:
            unknown[f"imports.{name}"] = f"not tried: {progress.stopped or 'no result'}"
    return Loaded(torch, imports, unknown, python, seconds, cached_at, tuple(records), progress.done)


def probe(src: Sources, python: str, versions: Mapping[str, str], names: Sequence[str] = IMPORTS) -> Loaded:
    """Run the child once and interpret what it reported."""
    timeout = src.effective_child_timeout()
    env = dict(src.environ)
    env.setdefault("PYTHONIOENCODING", "utf-8")
    start = time.monotonic()
    res = src.run(command(python, names), timeout, env)
    seconds = round(time.monotonic() - start, 3)
    records = parse_records(res.stdout)
    return interpret(records, res, python=python, timeout=timeout, versions=versions, seconds=seconds, names=names)
