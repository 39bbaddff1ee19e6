"""Load one TransformerEngine release's backend-selection code on a CPU and call it.

Used by tools/te_oracle.py (run as `python tools/te_runtime.py WHEEL_DIR` it answers JSON
lines: one case in, one result out). Nothing of TE's native side is loaded:

* `transformer_engine_torch` (the C++ extension) is a stub module; its enums are small
  integer enums, `get_cudnn_version` returns the faked cuDNN version and
  `get_fused_attn_backend` returns the injected C++ decision (which fused sub-backend
  cuDNN would run, or none).
* `transformer_engine/__init__.py` and `transformer_engine/common/__init__.py` are not
  executed (they dlopen libtransformer_engine.so and cuDNN); their packages are created
  empty so that pure-Python submodules (common.recipe, pytorch.*) import normally.
* flash-attn, FA3, FA4 and triton are stub modules; which flash-attn distributions are
  "installed", and their versions, is faked through importlib.metadata.version.
* torch.cuda reports one GPU of the faked compute capability.

For each (GPU class, installed flash-attn set) the modules that discover flash-attn at
import time are executed again, exactly as TE runs them at import.
"""

from __future__ import annotations

import enum
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import types
import warnings
from typing import Any, Dict, List, Optional, Tuple

# --------------------------------------------------------------------------- stubs


class _Any:
    """Stands in for anything of a stubbed native module: attribute, call, decorator, base."""

    def __init__(self, name: str = "stub") -> None:
        self._name = name

    def __getattr__(self, item: str) -> "_Any":
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _Any(f"{self._name}.{item}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Any(f"{self._name}()")

    def __getitem__(self, item: Any) -> "_Any":
        return _Any(f"{self._name}[]")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __mro_entries__(self, bases: Tuple[Any, ...]) -> Tuple[type, ...]:
        return (object,)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StubModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: List[str] = []  # a package: submodules are stubs too
        self.__file__ = f"<stub {name}>"

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _Any(f"{self.__name__}.{item}")


STUB_ROOTS = (
    "flash_attn",
    "flash_attn_2_cuda",
    "flash_attn_interface",
    "flash_attn_3",
    "flashattn_hopper",
    "nvdlfw_inspect",
    "onnxscript",
    "onnx",
    "transformer_engine_torch",
    "cudnn",
)


# TE's triton kernels (permutation, cross-entropy, padding): never run by backend selection.
TE_TRITON = ("transformer_engine.pytorch.triton", "transformer_engine.common.triton")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if (fullname.split(".")[0] in STUB_ROOTS and fullname != "transformer_engine_torch") or fullname.startswith(TE_TRITON):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return _StubModule(spec.name)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        return None


class FusedBackend(enum.IntEnum):
    NVTE_No_Backend = -1
    NVTE_F16_max512_seqlen = 0
    NVTE_F16_arbitrary_seqlen = 1
    NVTE_FP8 = 2


class FusedBackendNoMax512(enum.IntEnum):  # TE >= 2.16 removed sub-backend 0 (PR #2949)
    NVTE_No_Backend = -1
    NVTE_F16_arbitrary_seqlen = 1
    NVTE_FP8 = 2


_ENUMS: Dict[str, Any] = {"NVTE_Fused_Attn_Backend": FusedBackend}


class _EnumNamespace:
    """An enum or class of the extension: every member a distinct small int."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._members: Dict[str, int] = {}

    def __getattr__(self, item: str) -> int:
        if item.startswith("__"):
            raise AttributeError(item)
        return self._members.setdefault(item, len(self._members) + 100)

    @property
    def __members__(self) -> Dict[str, int]:
        # TE >= 2.17 checks at import that its Python DType mirrors the extension's.
        const = sys.modules.get("transformer_engine.pytorch.constants")
        mirror = getattr(const, self._name, None)
        if mirror is not None and hasattr(mirror, "__members__"):
            return {m: getattr(self, m) for m in mirror.__members__}
        return dict(self._members)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Any(f"{self._name}()")

    def __mro_entries__(self, bases: Tuple[Any, ...]) -> Tuple[type, ...]:
        return (object,)


# The injected state, read by the fakes below.
# TE <= 1.11 cannot even import without flash-attn: the first import sees one in its window.
STATE: Dict[str, Any] = {"sm": (9, 0), "cudnn": 90300, "fused": "arbitrary", "pkgs": {"flash-attn": "2.5.8"}}


def _fused_decision(*args: Any, **kwargs: Any) -> Any:
    enum_cls = _ENUMS["NVTE_Fused_Attn_Backend"]
    value = getattr(
        enum_cls,
        {"none": "NVTE_No_Backend", "max512": "NVTE_F16_max512_seqlen", "arbitrary": "NVTE_F16_arbitrary_seqlen", "fp8": "NVTE_FP8"}[STATE["fused"]],
    )
    if STATE.get("fused_returns_pair"):
        return value, "" if value != FusedBackend.NVTE_No_Backend else "injected: no fused backend"
    return value


class _Tex(_StubModule):
    def __getattr__(self, item: str) -> Any:
        if item == "get_cudnn_version":
            return lambda: STATE["cudnn"]
        if item == "get_fused_attn_backend":
            return _fused_decision
        if item in _ENUMS:
            return _ENUMS[item]
        if item[:1].isupper():
            return _ENUMS.setdefault(item, _EnumNamespace(item))
        return super().__getattr__(item)


# --------------------------------------------------------------------------- fakes of torch.cuda and metadata

_real_version = importlib.metadata.version


def _fake_version(dist: str) -> str:
    key = dist.lower().replace("_", "-")
    if key in ("flash-attn", "flash-attn-3", "flashattn-hopper", "flash-attn-4", "nvidia-cutlass-dsl"):
        got = STATE["pkgs"].get(key)
        if got is None:
            raise importlib.metadata.PackageNotFoundError(dist)
        return got
    if key.startswith("transformer-engine") or key.startswith("transformer_engine"):
        return STATE["te_version"]
    return _real_version(dist)


class _Props:
    def __init__(self) -> None:
        self.major, self.minor = STATE["sm"]
        self.name = f"fake sm{self.major}{self.minor}"
        self.total_memory = 80 << 30
        self.multi_processor_count = 132


def _install_fakes() -> None:
    import torch

    importlib.metadata.version = _fake_version  # type: ignore[assignment]
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    torch.cuda.device_count = lambda: 1  # type: ignore[assignment]
    torch.cuda.current_device = lambda: 0  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *a, **k: STATE["sm"]  # type: ignore[assignment]
    torch.cuda.get_device_properties = lambda *a, **k: _Props()  # type: ignore[assignment]
    torch.cuda.is_bf16_supported = lambda *a, **k: True  # type: ignore[assignment]


def _extension_names(te_dir: str) -> List[str]:
    """Names TE takes from the C++ extension (`tex.X`, or star-imported into cpp_extensions and
    imported from there) and does not define in Python: what `from transformer_engine_torch
    import *` must bind."""
    import re

    used: set = set()
    defined: set = set()
    for base, _dirs, files in os.walk(os.path.join(te_dir, "pytorch")):
        for f in files:
            if not f.endswith(".py"):
                continue
            text = open(os.path.join(base, f), encoding="utf-8").read()
            used.update(re.findall(r"\btex\.([A-Za-z_]\w*)", text))
            for block in re.findall(r"from transformer_engine\.pytorch\.cpp_extensions import \(?([^)]*?)\)?\n(?!\s)", text):
                used.update(n.split(" as ")[0].strip() for n in block.replace("\n", ",").split(",") if n.strip() and not n.strip().startswith("#"))
            if os.path.basename(base) == "cpp_extensions":
                defined.update(re.findall(r"^(?:def|class)\s+([A-Za-z_]\w*)", text, re.M))
                defined.update(re.findall(r"^([A-Za-z_]\w*)\s*[:=]", text, re.M))
    return sorted(n for n in used - defined if n.isidentifier())


def _sm() -> Tuple[int, int]:
    return STATE["sm"]


def _cudnn() -> Tuple[int, int, int]:
    v = STATE["cudnn"]
    mag = 1000 if v < 90000 else 10000
    major, rest = divmod(v, mag)
    minor, patch = divmod(rest, 100)
    return (major, minor, patch)


# --------------------------------------------------------------------------- TE <= 1.8: the inline selection


class _NoCudaAsserts(importlib.machinery.SourceFileLoader):
    """Loads a TE module with every `X.is_cuda` read as True: TE <= 1.8 asserts CUDA tensors
    in `DotProductAttention.forward` before it selects a backend, and the oracle's tensors live
    on the CPU. Only the compiled code changes; TE's files on disk are not touched."""

    def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[no-untyped-def]
        import ast

        class _IsCuda(ast.NodeTransformer):
            def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
                self.generic_visit(node)
                if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
                    return ast.copy_location(ast.Constant(True), node)
                return node

        tree = ast.fix_missing_locations(_IsCuda().visit(ast.parse(data, filename=path)))
        return compile(tree, path, "exec", dont_inherit=True)


class _NoCudaFinder(importlib.abc.MetaPathFinder):
    def __init__(self, names: Dict[str, str]) -> None:
        self.names = names  # module name -> file

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname in self.names:
            return importlib.util.spec_from_file_location(fullname, self.names[fullname], loader=_NoCudaAsserts(fullname, self.names[fullname]))
        return None


class _Chosen(Exception):
    """Raised by a backend recorder: TE's forward picked this backend."""


def _recorder(name: str) -> Any:
    import torch

    class Recorder(torch.nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise _Chosen(name)

    return Recorder()


# --------------------------------------------------------------------------- loading one release


def _patch_queries() -> None:
    """Point every loaded TE module's device / cuDNN query at the fakes (the originals may be
    lru_cached, and modules bind them by name at import)."""
    for m in list(sys.modules.values()):
        if getattr(m, "__name__", "").startswith("transformer_engine.pytorch"):
            if getattr(m, "get_device_compute_capability", None) not in (None, _sm):
                m.get_device_compute_capability = _sm
            if getattr(m, "get_cudnn_version", None) not in (None, _cudnn):
                m.get_cudnn_version = _cudnn


class Release:
    """One extracted wheel: its selection module, re-run per GPU class / flash-attn set."""

    def __init__(self, root: str, version: str) -> None:
        self.root = root
        self.version = version
        STATE["te_version"] = version
        sys.meta_path.insert(0, _StubFinder())
        tex = _Tex("transformer_engine_torch")
        tex.__all__ = _extension_names(os.path.join(root, "transformer_engine"))  # type: ignore[attr-defined]
        sys.modules["transformer_engine_torch"] = tex
        sys.modules["transformer_engine_extensions"] = tex  # the extension's name up to TE 1.7
        if importlib.util.find_spec("pkg_resources") is None:
            # TE <= 1.6 take `packaging` from setuptools' pkg_resources (gone from new setuptools)
            import packaging.version

            shim = types.ModuleType("pkg_resources")
            shim.packaging = packaging  # type: ignore[attr-defined]
            sys.modules["pkg_resources"] = shim
        fa_py = os.path.join(root, "transformer_engine", "pytorch", "cpp_extensions", "fused_attn.py")
        if "F16_max512_seqlen" not in open(fa_py, encoding="utf-8").read():
            _ENUMS["NVTE_Fused_Attn_Backend"] = FusedBackendNoMax512
        # torch 2.13 dropped the TorchScript ONNX helpers that TE 1.x imports for ONNX export only
        import torch.onnx
        import torch.onnx._internal

        for parent, child in (
            (torch.onnx, "_type_utils"),
            (torch.onnx, "symbolic_helper"),
            (torch.onnx, "register_custom_op_symbolic"),
            (torch.onnx._internal, "jit_utils"),
        ):
            if not hasattr(parent, child):
                stub = _StubModule(f"{parent.__name__}.{child}")
                sys.modules[stub.__name__] = stub
                setattr(parent, child, stub)
        _install_fakes()
        te_dir = os.path.join(root, "transformer_engine")
        # transformer_engine/__init__.py and common/__init__.py are not executed (they dlopen
        # the native library and cuDNN): empty packages stand in, and any name taken from
        # `common` (get_te_path, load_framework_extension, ...) is an inert stub.
        top = types.ModuleType("transformer_engine")
        top.__path__ = [te_dir]
        top.__version__ = version  # type: ignore[attr-defined]
        sys.modules["transformer_engine"] = top
        common = _StubModule("transformer_engine.common")
        common.__path__ = [os.path.join(te_dir, "common")]
        sys.modules["transformer_engine.common"] = common
        top.common = common  # type: ignore[attr-defined]
        sys.path.insert(0, root)
        warnings.simplefilter("ignore")
        # TE's own "Disabling X for Y" debug lines are kept with each answer (its reasons).
        os.environ["NVTE_DEBUG"], os.environ["NVTE_DEBUG_LEVEL"] = "1", "2"
        self.reasons: List[str] = []
        reasons = self.reasons

        class _Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                msg = record.getMessage()
                if msg.startswith("Disabling") or msg.startswith("Selected"):
                    reasons.append(msg[:200])

        for name in ("DotProductAttention", ""):
            lg = logging.getLogger(name)
            lg.handlers = [_Capture()]
            lg.propagate = False
            lg.addHandler = lambda h, _lg=lg: None  # type: ignore[method-assign]
        pt = os.path.join(te_dir, "pytorch")
        if os.path.exists(os.path.join(pt, "attention", "dot_product_attention", "utils.py")):
            self.selection = "transformer_engine.pytorch.attention.dot_product_attention.utils"
            self.discovery = "transformer_engine.pytorch.attention.dot_product_attention.backends"
        elif os.path.exists(os.path.join(pt, "dot_product_attention", "utils.py")):
            self.selection = "transformer_engine.pytorch.dot_product_attention.utils"
            self.discovery = "transformer_engine.pytorch.attention"
        else:
            self.selection = "transformer_engine.pytorch.attention"
            self.discovery = "transformer_engine.pytorch.attention"
        src = open(os.path.join(root, *self.selection.split(".")) + ".py", encoding="utf-8").read()
        STATE["fused_returns_pair"] = "reject_message = " in src and "tex.get_fused_attn_backend(" in src
        # TE <= 1.8 has no get_attention_backend: its choice is made inline in
        # DotProductAttention.forward, which the oracle runs on CPU tensors (see run_forward).
        self.legacy = "def get_attention_backend(" not in src
        self.fp8_attention = "fp8_dpa" in src
        if self.legacy:
            sys.meta_path.insert(0, _NoCudaFinder({self.selection: os.path.join(root, *self.selection.split(".")) + ".py"}))
        self.recipe_mod = importlib.import_module("transformer_engine.common.recipe")
        # transformer_engine/pytorch/__init__.py runs as shipped, minus its one top-level call
        # that loads the C++ extension (`_load_library()`; 2.4+ call `common`'s stub instead).
        path = os.path.join(te_dir, "pytorch", "__init__.py")
        lines = open(path, encoding="utf-8").read().splitlines()
        src = "\n".join("pass  # native load skipped" if ln.strip() == "_load_library()" and not ln.startswith(" ") else ln for ln in lines)
        pt_mod = types.ModuleType("transformer_engine.pytorch")
        pt_mod.__path__ = [os.path.join(te_dir, "pytorch")]
        pt_mod.__file__ = path
        pt_mod.__package__ = "transformer_engine.pytorch"
        sys.modules["transformer_engine.pytorch"] = pt_mod
        top.pytorch = pt_mod  # type: ignore[attr-defined]
        exec(compile(src, path, "exec"), pt_mod.__dict__)
        self._key: Optional[Tuple[Any, ...]] = None
        self.mod: Any = None
        self.import_error: Optional[str] = None

    def load(self, sm: Tuple[int, int], pkgs: Dict[str, str]) -> None:
        """(Re-)execute the modules that read the GPU and flash-attn at import time."""
        key = (sm >= (10, 0), sm, tuple(sorted(pkgs.items())))
        if key == self._key:
            return
        STATE["sm"], STATE["pkgs"] = sm, dict(pkgs)
        self._key = key
        self.import_error = None
        _patch_queries()
        for name in (self.selection, self.discovery):
            sys.modules.pop(name, None)
        try:
            self.mod = importlib.import_module(self.selection)
            if self.discovery != self.selection:
                importlib.import_module(self.discovery)
        except Exception as exc:  # TE itself fails to import here (e.g. flash-attn missing in 1.x)
            self.mod = None
            self.import_error = f"{type(exc).__name__}: {exc}"
        _patch_queries()

    # ---------------------------------------------------------------- one case

    def params(self, case: Dict[str, Any]) -> Any:
        import torch

        mod = self.mod
        names = {f.name for f in __import__("dataclasses").fields(mod.AttentionParams)}
        fmt = case["qkv_format"]
        mask = case["mask"]
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8": torch.bfloat16}[case["dtype"]]
        window = tuple(case["window_size"]) if case.get("window_size") is not None else None
        if hasattr(mod, "check_set_window_size"):
            window = mod.check_set_window_size(mask, window)
        kw: Dict[str, Any] = dict(
            qkv_type=torch.Tensor,
            qkv_dtype=dtype,
            qkv_layout=f"{fmt}_{fmt}_{fmt}",
            batch_size=2,
            num_heads=case["num_heads"],
            num_gqa_groups=case["num_kv_heads"],
            max_seqlen_q=case["seq_len_q"],
            max_seqlen_kv=case["seq_len_kv"],
            attn_mask_type=mask,
            window_size=window,
            alibi_slopes_shape=None,
            core_attention_bias_type="alibi" if case.get("alibi") else "no_bias",
            core_attention_bias_shape=None,
            core_attention_bias_requires_grad=False,
            pad_between_seqs=False,
            attention_dropout=case["dropout"],
            context_parallel=case["cp_size"] > 1,
            deterministic=case["deterministic"] or case["env"].get("NVTE_ALLOW_NONDETERMINISTIC_ALGO") == "0",
            is_training=case["training"],
            fp8=case["dtype"] == "fp8",
            fp8_meta={"recipe": self.recipe_mod.DelayedScaling(fp8_dpa=True)} if case["dtype"] == "fp8" else {},
        )
        if "head_dim" in names:
            if case["head_dim_qk"] != case["head_dim_v"]:
                return None  # this release has one head_dim: no MLA
            kw["head_dim"] = case["head_dim_qk"]
        else:
            kw["head_dim_qk"], kw["head_dim_v"] = case["head_dim_qk"], case["head_dim_v"]
        if "cp_comm_type" in names:
            kw["cp_comm_type"] = case["cp_comm_type"]
        if "cp_size" in names:
            kw["cp_size"] = case["cp_size"]
        if "bottom_right_diagonal" in names:
            kw["bottom_right_diagonal"] = mask not in ("causal", "padding_causal")
        if "nominal_dtype" in names:
            kw["nominal_dtype"] = dtype
        if "softmax_type" in names:
            kw["softmax_type"] = case.get("softmax_type", "vanilla")  # TE >= 2.8
        return mod.AttentionParams(**{k: v for k, v in kw.items() if k in names})

    def run(self, case: Dict[str, Any]) -> Dict[str, Any]:
        sm = (case["sm"] // 10, case["sm"] % 10)
        self.load(sm, case["packages"])
        if self.mod is None:
            return {"status": "import_error", "error": self.import_error}
        if self.legacy:
            return self.run_forward(case)
        STATE["cudnn"] = case["cudnn_int"]
        STATE["fused"] = case["fused_cpp"]
        saved = dict(os.environ)
        os.environ.update(case["env"])
        del self.reasons[:]
        try:
            if self.version.startswith("1.") and hasattr(self.mod, "FlashAttention") and "flash-attn" in case["packages"]:
                # DotProductAttention.__init__ builds FlashAttention, which in 1.9-1.11 asserts
                # the flash-attn version window before any backend is selected.
                try:
                    self.mod.FlashAttention(1.0)
                except AssertionError as exc:
                    return {"status": "construct_error", "error": f"AssertionError: {exc}"[:300]}
            params = self.params(case)
            if params is None:
                return {"status": "not_applicable", "error": "this release has no separate head_dim_qk/head_dim_v"}
            out = self.mod.get_attention_backend(params)
        except Exception as exc:  # a raise inside TE's selection is an answer too
            return {"status": "raised", "error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return {"status": "ok", **_decode(out), "reasons": list(self.reasons)}


    # ---------------------------------------------------------------- one case, TE <= 1.8

    def run_forward(self, case: Dict[str, Any]) -> Dict[str, Any]:
        """Build DotProductAttention and call its forward on CPU tensors of the case's shapes,
        with the three backend modules replaced by recorders: the first one called is TE's
        choice. TE <= 1.8 decide inline in forward, so only the choice is observable (not
        each backend's availability); an exception TE raises (an assert refusing the inputs,
        "no backend supports these inputs") is recorded as the answer."""
        import inspect
        import torch

        mod = self.mod
        init_params = inspect.signature(mod.DotProductAttention.__init__).parameters
        fwd_params = inspect.signature(mod.DotProductAttention.forward).parameters
        if case["head_dim_qk"] != case["head_dim_v"]:
            return {"status": "not_applicable", "error": "this release has one head_dim (kv_channels)"}
        if case.get("window_size") is not None and "window_size" not in fwd_params:
            return {"status": "not_applicable", "error": "this release has no window_size"}
        if case.get("alibi") and "alibi_slopes" not in fwd_params:
            return {"status": "not_applicable", "error": "this release has no ALiBi"}
        STATE["cudnn"] = case["cudnn_int"]
        STATE["fused"] = case["fused_cpp"]
        if STATE["fused"] == "fp8" and not self.fp8_attention:
            # TE <= 1.7 have no FP8 attention: q/k/v reach cuDNN in BF16, so its "supported"
            # verdict is the F16 arbitrary-seqlen sub-backend
            STATE["fused"] = "arbitrary"
        saved = dict(os.environ)
        os.environ.update(case["env"])
        del self.reasons[:]
        fmt, mask = case["qkv_format"], case["mask"]
        cp_group = object() if case["cp_size"] > 1 else None
        mod.get_distributed_world_size = lambda group=None: case["cp_size"] if group is cp_group and group is not None else 1
        # get_alibi builds the ALiBi slopes on the GPU for the chosen backend's arguments, after
        # the choice is made (no slopes are passed here, so the fused branch never needs it)
        if hasattr(mod, "get_alibi"):
            mod.get_alibi = lambda *a, **k: (None, None)
        kw: Dict[str, Any] = dict(num_gqa_groups=case["num_kv_heads"], attention_dropout=case["dropout"],
                                  qkv_format=fmt, attn_mask_type=mask)
        if "window_size" in init_params and case.get("window_size") is not None:
            kw["window_size"] = tuple(case["window_size"])
        try:
            # deterministic training as the user asks for it: torch.use_deterministic_algorithms
            # (TE 1.5-1.8 read it in __init__; 1.2-1.4 read only NVTE_ALLOW_NONDETERMINISTIC_ALGO)
            torch.use_deterministic_algorithms(bool(case["deterministic"]))
            try:
                dpa = mod.DotProductAttention(case["num_heads"], case["head_dim_qk"], **kw)
            except AssertionError as exc:
                return {"status": "construct_error", "error": f"AssertionError: {exc}"[:300], "mode": "forward"}
            finally:
                torch.use_deterministic_algorithms(False)
            dpa.cp_group = cp_group
            dpa.train(case["training"])
            for attr, name in (("flash_attention", "te.flash"), ("fused_attention", "te.fused"), ("unfused_attention", "te.unfused")):
                if hasattr(dpa, attr):
                    setattr(dpa, attr, _recorder(name))
            fp8 = case["dtype"] == "fp8"
            recipe = self.recipe_mod.DelayedScaling()
            if fp8:
                recipe.fp8_dpa = True

            @__import__("contextlib").contextmanager
            def prepare_forward(inp: Any, *args: Any, **kwargs: Any) -> Any:
                dpa.fp8 = fp8  # what fp8_autocast(enabled=fp8) would leave on the module
                dpa.fp8_meta["recipe"] = recipe
                yield inp

            dpa.prepare_forward = prepare_forward
            dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8": torch.bfloat16}[case["dtype"]]
            sq, skv, h, hkv, d = case["seq_len_q"], case["seq_len_kv"], case["num_heads"], case["num_kv_heads"], case["head_dim_qk"]
            args: Dict[str, Any] = {}
            if fmt == "thd":
                q = torch.empty(sq, h, d, dtype=dtype)
                k, v = (torch.empty(skv, hkv, d, dtype=dtype) for _ in range(2))
                args.update(cu_seqlens_q=torch.tensor([0, sq // 2, sq], dtype=torch.int32),
                            cu_seqlens_kv=torch.tensor([0, skv // 2, skv], dtype=torch.int32))
                if "max_seqlen_q" in fwd_params:
                    args.update(max_seqlen_q=sq, max_seqlen_kv=skv)
            elif fmt == "bshd":
                q = torch.empty(1, sq, h, d, dtype=dtype)
                k, v = (torch.empty(1, skv, hkv, d, dtype=dtype) for _ in range(2))
            else:
                q = torch.empty(sq, 1, h, d, dtype=dtype)
                k, v = (torch.empty(skv, 1, hkv, d, dtype=dtype) for _ in range(2))
            if "window_size" in fwd_params and case.get("window_size") is not None:
                args["window_size"] = tuple(case["window_size"])
            if case.get("alibi"):
                args["core_attention_bias_type"] = "alibi"
            args["attn_mask_type"] = mask
            try:
                dpa(q, k, v, **args)
            except _Chosen as chosen:
                return {"status": "ok", "selected": str(chosen), "available": None, "mode": "forward", "reasons": list(self.reasons)}
            except Exception as exc:  # TE refuses the inputs: that is its answer
                first = (str(exc).strip().splitlines() or [""])[0]
                return {"status": "raised", "error": f"{type(exc).__name__}: {first}"[:300], "mode": "forward", "reasons": list(self.reasons)}
            return {"status": "raised", "error": "forward returned without calling a backend", "mode": "forward"}
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _decode(out: Tuple[Any, ...]) -> Dict[str, Any]:
    """get_attention_backend's return value -> availability and choice."""
    available = list(out[-1])
    if len(out) == 6:  # use_flash, flash_backend, use_fused, fused_backend, use_unfused, available
        use = (out[0], out[2], out[4])
    else:  # 1.x: use_flash, use_fused, fused_backend, use_unfused, available
        use = (out[0], out[1], out[3])
    names = ("te.flash", "te.fused", "te.unfused")
    selected = next((n for n, u in zip(names, use) if u), None)
    return {"available": {n: bool(a) for n, a in zip(names, available)}, "selected": selected}


def main() -> None:
    root, version = sys.argv[1], sys.argv[2]
    rel = Release(root, version)
    out = sys.stdout
    sys.stdout = sys.stderr  # TE may print; keep the protocol clean
    for line in sys.stdin:
        case = json.loads(line)
        out.write(json.dumps(rel.run(case)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
