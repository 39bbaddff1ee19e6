"""Fakes for probe tests: a site-packages tree builder, an NVML module, a subprocess runner."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from doctor.probe.child import MARKER
from doctor.probe.sources import RunResult, Sources


# --------------------------------------------------------------------------- site-packages


def add_dist(
    site: Path,
    name: str,
    version: Optional[str],
    *,
    folder: Optional[str] = None,
    requires: Sequence[str] = (),
    record: Sequence[str] = (),
    egg: bool = False,
) -> Path:
    """A dist-info (or egg-info) folder with METADATA; version None leaves the header out."""
    folder = folder or f"{name.replace('-', '_')}-{version or '0'}.{'egg-info' if egg else 'dist-info'}"
    d = site / folder
    d.mkdir(parents=True, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}"]
    if version is not None:
        lines.append(f"Version: {version}")
    lines += [f"Requires-Dist: {r}" for r in requires]
    lines += ["", "Long description: Version: 9.9.9 must not be read from the body."]
    (d / ("PKG-INFO" if egg else "METADATA")).write_text("\n".join(lines) + "\n")
    if record:
        (d / "RECORD").write_text("".join(f"{r},sha256=x,1\n" for r in record))
    return d


def add_file(site: Path, rel: str, text: str = "") -> Path:
    p = site / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def add_torch(
    site: Path,
    version: str = "2.4.0+cu121",
    cuda: Optional[str] = "12.1",
    requires: Sequence[str] = (),
    init: str = "",
) -> None:
    add_dist(site, "torch", version, requires=requires)
    cuda_literal = "None" if cuda is None else repr(cuda)
    add_file(
        site,
        "torch/version.py",
        "from typing import Optional\n\n"
        f"__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = {cuda_literal}\n"
        "git_version = 'abc123'\nhip: Optional[str] = None\n",
    )
    add_file(site, "torch/__init__.py", textwrap.dedent(init))


WORKING_TORCH = """
    import types
    __version__ = {version!r}

    class version:
        cuda = {cuda!r}
        hip = None
        git_version = "abc123"

    class _C:
        _GLIBCXX_USE_CXX11_ABI = {abi!r}

    class backends:
        class cudnn:
            @staticmethod
            def version():
                return {cudnn!r}

    class cuda:
        @staticmethod
        def is_available():
            return {available!r}

        @staticmethod
        def device_count():
            return {count!r}

        @staticmethod
        def get_arch_list():
            return {arch!r}
"""


def working_torch_init(
    version: str = "2.4.0+cu121",
    cuda: Optional[str] = "12.1",
    abi: bool = False,
    cudnn: Optional[int] = 90100,
    available: bool = True,
    count: int = 1,
    arch: Sequence[str] = ("sm_80", "sm_90"),
) -> str:
    return WORKING_TORCH.format(
        version=version, cuda=cuda, abi=abi, cudnn=cudnn, available=available, count=count, arch=list(arch)
    )


# --------------------------------------------------------------------------- NVML


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """Enough of pynvml for doctor.probe.gpus; names come back as bytes like old bindings."""

    def __init__(
        self,
        gpus: Sequence[Tuple[str, Tuple[int, int], int]] = (("NVIDIA A100-SXM4-80GB", (8, 0), 81920),),
        driver: str = "550.54.15",
        cuda: int = 12040,
        fail_init: bool = False,
    ) -> None:
        self.gpus = list(gpus)
        self.driver = driver
        self.cuda = cuda
        self.fail_init = fail_init
        self.shutdown_called = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h][0].encode()

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> Tuple[int, int]:
        return self.gpus[h][1]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        class Info:
            total = self.gpus[h][2] * 1024 * 1024

        return Info()


def no_nvml() -> Any:
    raise OSError("libnvidia-ml.so.1 cannot be loaded")


# --------------------------------------------------------------------------- subprocesses

Answer = Union[RunResult, Callable[[Sequence[str], float, Optional[Mapping[str, str]]], RunResult]]


class FakeRunner:
    """Answers by program name (basename of argv[0]); records every call."""

    def __init__(self, answers: Optional[Mapping[str, Answer]] = None) -> None:
        self.answers: Dict[str, Answer] = dict(answers or {})
        self.calls: List[Tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None) -> RunResult:
        self.calls.append(tuple(argv))
        prog = os.path.basename(argv[0])
        answer = self.answers.get(prog)
        if answer is None and len(argv) > 1 and argv[1] == "-c":
            answer = self.answers.get("python")
        if answer is None:
            return RunResult(tuple(argv), None, error=f"{argv[0]}: not found")
        if callable(answer):
            return answer(argv, timeout, env)
        return answer

    def count(self, prog: str) -> int:
        return sum(1 for c in self.calls if os.path.basename(c[0]) == prog or (prog == "python" and len(c) > 1 and c[1] == "-c"))


def ok(stdout: str = "", argv: Sequence[str] = ("x",)) -> RunResult:
    return RunResult(tuple(argv), 0, stdout, "")


def child_output(*records: Mapping[str, Any]) -> str:
    return "".join(MARKER + json.dumps(r) + "\n" for r in records)


def good_child_records(abi: bool = True, cudnn: Optional[int] = 90100, available: bool = True) -> List[Dict[str, Any]]:
    imports = ["flash_attn", "flash_attn_2_cuda", "flash_attn_interface", "flash_attn.cute",
               "transformer_engine", "transformer_engine.pytorch", "xformers"]
    recs: List[Dict[str, Any]] = [
        {"step": "start", "python": "3.11.7", "executable": sys.executable},
        {"step": "begin", "name": "torch"},
        {"step": "torch_import", "status": "ok", "seconds": 1.2},
        {"step": "torch", "facts": {
            "version": {"value": "2.4.0+cu121"}, "cuda": {"value": "12.1"}, "hip": {"value": None},
            "git_version": {"value": "abc123"}, "cxx11_abi": {"value": abi},
            "cudnn_version_int": {"value": cudnn}, "cudnn_mapped": {"value": []},
            "cudnn_in_use": {"value": None}, "cudart_path": {"value": None}}},
    ]
    for name in imports:
        recs.append({"step": "begin", "name": name})
        recs.append({"step": "import", "name": name, "result": {"status": "missing", "error": f"No module named {name!r}"}})
    recs += [
        {"step": "begin", "name": "cuda"},
        {"step": "cuda", "facts": {"cuda_available": {"value": available}, "device_count": {"value": 1},
                                   "arch_list": {"value": ["sm_80", "sm_90"]}}},
        {"step": "done"},
    ]
    return recs


def sources(site: Path, **changes: Any) -> Sources:
    """Sources that see only `site` and fakes: no NVML, no nvidia-smi, no system libraries."""
    base: Dict[str, Any] = dict(
        environ={"PATH": "/nonexistent"},
        site_paths=[str(site)],
        run=FakeRunner(),
        nvml_loader=no_nvml,
        which=lambda name: None,
        system_lib_dirs=(),
        system_include_dirs=(),
        use_ldconfig=False,
        cache_dir=None,
        cuda_default_dir=str(site / "no-usr-local-cuda"),
        loader_default_dirs=(),
    )
    base.update(changes)
    return Sources(**base)
