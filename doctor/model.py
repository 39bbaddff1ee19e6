"""The frozen values that cross pipeline stages.

probe  -> Facts (what is installed and loaded, from a live probe or a snapshot file)
input  -> Workload (what the user is about to run)
rules  -> BackendStatus, Finding (with Fix)
verify -> CaseResult
report -> Report (everything above, ready for a formatter)

`Facts` is a typed view of the snapshot JSON document (docs/snapshot.md; built by
doctor.snapshot.facts_from_snapshot). A section that is absent from a snapshot is `None` here
and every fact under it is unknown; the reason is kept in `Facts.unknown`.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Dict, Literal, Mapping, Optional, Tuple

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
    # the CUDA xformers' compiled extensions were built with ("12.8"; "rocm" or "cpu" for a build
    # without CUDA), from the installed xformers/cpp_lib.json (written by its setup.py); None:
    # xformers absent or the file unread
    xformers_build: Optional[str] = None
    # whether the installed xformers carries its own FlashAttention-3 extension
    # (xformers/_C_flashattention3.* in 0.0.29-0.0.30, xformers/flash_attn_3/_C.* from 0.0.31);
    # a source build has it only where its arch list kept 8.0/9.0 or it was built on an sm90 GPU.
    # None: xformers absent or its folder unread
    xformers_fa3: Optional[bool] = None
    # the GPU code in the installed flash-attn's extension (flash_attn_2_cuda; flash_attn_cuda for
    # 0.2.x/1.x), read from its
    # .nv_fatbin section (doctor.probe.fatbin): "sm_80", "compute_90", as torch.arch_list
    flash_attn_archs: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class CudnnFile:
    """One libcudnn file and the cuDNN release it is (None when neither name nor header says)."""

    path: str
    version: Optional[str] = None


@dataclass(frozen=True)
class CudnnFolder:
    """A folder TransformerEngine globs for `libcudnn.so*` (recursively) before the Python wheels:
    `var` is the variable that named it (CUDNN_HOME, CUDNN_PATH, CUDA_HOME, CUDA_PATH) or None
    for /usr/local/cuda; `found` the file its glob takes first (None: no libcudnn there);
    `error` why the walk did not finish (then `found` is unknown)."""

    var: Optional[str]
    dir: str
    found: Optional[CudnnFile] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class CudnnSearch:
    """What TransformerEngine's own cuDNN search would find on this machine before the Python
    wheels (snapshot key cudnn.search): the folders it globs, and the `libcudnn.so` (unversioned
    name) that `dlopen("libcudnn.so")` finds on the loader path (None: none there)."""

    folders: Tuple[CudnnFolder, ...]
    unversioned: Optional[CudnnFile] = None


@dataclass(frozen=True)
class CudnnInfo:
    version: Optional[str] = None  # effective: loaded if known, else best static estimate
    loaded: Optional[str] = None  # what torch actually loaded (child process)
    loaded_path: Optional[str] = None
    installed: Optional[str] = None  # newest nvidia-cudnn-cuXX wheel or system libcudnn found
    bundled: Optional[str] = None  # what the installed torch wheel pins (Requires-Dist)
    mismatch: Optional[str] = None  # installed vs loaded vs bundled disagree: how
    # A libcudnn on the system library path (outside the Python wheels) whose version differs
    # from the effective one (snapshot key cudnn.system, a list); "" when none differs.
    system: Optional[str] = None
    # TransformerEngine's own search (None: not probed, a snapshot written before it was recorded)
    search: Optional[CudnnSearch] = None

    @property
    def installed_is_bundled(self) -> Optional[bool]:
        """Whether the installed cuDNN is the release torch pins (major.minor.patch; the pin's
        fourth component is the wheel build); None when either is unknown."""
        if not self.installed or not self.bundled:
            return None
        return self.installed.split(".")[:3] == self.bundled.split(".")[:3]

    @property
    def loaded_incompatible(self) -> Optional[bool]:
        """Whether torch refuses the loaded cuDNN as built against its pin: another major
        version, or an older minor of the same major (torch/backends/cudnn/__init__.py
        compares major and minor only); None when either is unknown."""
        lo, bu = major_minor(self.loaded), major_minor(self.bundled)
        if lo is None or bu is None:
            return None
        return lo[0] != bu[0] or lo[1] < bu[1]


def major_minor(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """(major, minor) of a dotted version string; None when it has no such prefix."""
    parts = (text or "").split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


# Jetson's integrated GPUs (TX1, TX2, Xavier, Orin). The CUDA C Programming Guide's cubin
# compatibility across minors holds for desktop/datacenter GPUs, "not for Tegra": there a cubin
# runs only on its own SM (jax#40487: an sm_80 cubin gives "no kernel image" on Orin, CUDA 12.6).
TEGRA_SMS = frozenset({53, 62, 72, 87})


# Jetson Thor's SM: 10.1 up to CUDA 12.9, renamed 11.0 from CUDA 13.0 (PTX ISA 9.0, ".target":
# sm_101/sm_101f/sm_101a are renamed sm_110/sm_110f/sm_110a, and the sm_11x family holds sm_110f and
# sm_101f). One GPU under two numbers: arch_runs_on reads both the target and the GPU through this,
# so sm_101f does not run on 10.3 and sm_100/sm_100f not on a Thor reporting 10.1 (torch 2.14.1
# torch/cuda/__init__.py DEVICE_REQUIREMENT: 100 excludes 101, 101 and 110 run on {101, 110}).
RENAMED_SM = {101: 110}


def arch_runs_on(arch_list: Optional[Tuple[str, ...]], sm: int, tegra: bool = False) -> Optional[bool]:
    """Whether a build for `arch_list` ("sm_80", "compute_120", "sm_90a", "compute_100f", ...)
    has code for a GPU of compute capability `sm` (86 for 8.6); None without a list.

    A plain cubin runs on its major at an equal or higher minor (on a Tegra GPU, `tegra`, only
    on its own SM); plain PTX on any equal or newer architecture (the driver compiles it). An
    architecture-specific target (suffix "a", sm_90a/compute_90a) runs only on exactly its
    compute capability, cubin and PTX alike; a family-specific one (suffix "f") on its major at
    an equal or higher minor, never on another major (CUDA C++ Programming Guide, "Feature Set
    Compiler Targets"; PTX ISA, ".target"). Thor's SM 10.1 is read as its CUDA 13 number 11.0
    (RENAMED_SM), in the target and in the GPU alike. An entry of another form is skipped."""
    if arch_list is None:
        return None
    major, minor = divmod(RENAMED_SM.get(sm, sm), 10)
    for entry in arch_list:
        kind, _, num = entry.partition("_")
        suffix = num[-1:] if num[-1:] in ("a", "f") else ""
        digits = num[: len(num) - len(suffix)]
        if not digits.isdigit() or kind not in ("sm", "compute"):
            continue
        a_major, a_minor = divmod(RENAMED_SM.get(int(digits), int(digits)), 10)
        if suffix == "a":
            runs = (a_major, a_minor) == (major, minor)
        elif suffix == "f" or kind == "sm":
            # a cubin, or family PTX: the same major at an equal or higher minor
            runs = a_major == major and (a_minor == minor if tegra and kind == "sm" else a_minor <= minor)
        else:
            runs = (a_major, a_minor) <= (major, minor)
        if runs:
            return True
    return False


def driver_behind(torch_cuda: Optional[str], driver_cuda: Optional[str]) -> Optional[str]:
    """How the driver's highest CUDA compares with the CUDA torch was built for: "major" (an
    older major: the runtime does not start), "minor" (same major, older minor: minor-version
    compatibility, which for CUDA 11 needs driver 450.80.02 / 452.39 on Windows or later:
    TORCH-DRIVER-BEFORE-MINOR-COMPAT), "no"; None when either is unknown."""
    t, d = major_minor(torch_cuda), major_minor(driver_cuda)
    if t is None or d is None:
        return None
    if d[0] < t[0]:
        return "major"
    if d[0] == t[0] and d[1] < t[1]:
        return "minor"
    return "no"


# The distributions a TransformerEngine for PyTorch is installed as (the meta package, the PyTorch
# extension, the core library per CUDA major); transformer-engine-jax is not one of them.
TE_DISTS = ("transformer-engine", "transformer-engine-torch", "transformer-engine-cu12", "transformer-engine-cu13")


# PyPI's empty placeholders (transformer-engine 0.0.0, transformer-engine-cu12 0.0.0: metadata
# only, no transformer_engine package; rules/conditions.yaml te_pypi_placeholder)
TE_PLACEHOLDER_VERSION = "0.0.0"


def te_dist_versions(packages: Mapping[str, str]) -> list:
    """The versions of the TE_DISTS that are installed, in TE_DISTS order (placeholders included)."""
    return [packages[d] for d in TE_DISTS if packages.get(d)]


def installed_te(packages: Mapping[str, str]) -> Optional[str]:
    """The installed TransformerEngine version, read from the first of TE_DISTS present that is
    not PyPI's empty 0.0.0 placeholder (which installs no TransformerEngine)."""
    return next((v for v in te_dist_versions(packages) if v != TE_PLACEHOLDER_VERSION), None)


FP8_RECIPES = ("delayed", "current", "mxfp8", "block", "nvfp4")  # TE recipes: DelayedScaling, Float8CurrentScaling, ...


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
    status: str  # ok | error | missing | timeout | present (looked for, not imported: targets.PRESENCE_ONLY)
    error: Optional[str] = None
    cause: Optional[str] = None  # decoded cause of an `undefined symbol`, ABI mismatch, ...
    fix: Optional[str] = None  # what to do about it (the matching wheel, a rebuild)


@dataclass(frozen=True)
class PythonInfo:
    version: Optional[str] = None
    implementation: Optional[str] = None


# What `platform.os` and `platform.arch` read (doctor.probe.hostinfo writes `uname`'s words)
PLATFORM_OS = ("linux", "windows", "darwin")
PLATFORM_ARCH = ("x86_64", "aarch64", "ppc64le")
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}
# what people write by hand in a snapshot (sys.platform, os.name, marketing names)
_OS_ALIASES = {"win32": "windows", "win64": "windows", "win": "windows", "nt": "windows",
               "macos": "darwin", "mac": "darwin", "osx": "darwin", "macosx": "darwin"}


@dataclass(frozen=True)
class PlatformInfo:
    """The operating system and CPU architecture as the snapshot records them ("Linux 5.15.0",
    "x86_64", "glibc 2.35"); the properties are what rules compare against."""

    os: Optional[str] = None
    arch: Optional[str] = None
    libc: Optional[str] = None

    @property
    def system(self) -> Optional[str]:
        """linux | windows | darwin (or the first word of `os`, lower case); None if unknown."""
        if not self.os or not self.os.strip():
            return None
        word = self.os.split()[0].lower()
        return _OS_ALIASES.get(word, word)

    @property
    def machine(self) -> Optional[str]:
        """x86_64 | aarch64 | ... (Windows' AMD64 and macOS' arm64 under their Linux names)."""
        if not self.arch or not self.arch.strip():
            return None
        a = self.arch.strip().lower()
        return _ARCH_ALIASES.get(a, a)

    @property
    def glibc(self) -> Optional[str]:
        """The glibc version ("2.35"), None on musl, macOS, Windows or when not probed."""
        if not self.libc:
            return None
        text = self.libc.strip()
        # a bare version, as people write glibc's ("2.31"); glibc is 2.x, so a bare "1.2.4"
        # (musl's numbering) is not taken for an ancient glibc
        if re.fullmatch(r"2\.\d+(\.\d+)?", text):
            return text
        name, _, version = text.partition(" ")
        if name.lower() != "glibc":
            return None
        return version.strip() or None


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
    platform: PlatformInfo = field(default_factory=PlatformInfo)
    host: Optional[str] = None
    unknown: Mapping[str, str] = field(default_factory=dict)  # fact path -> why it could not be probed
    source: str = "probe"  # "probe" or the snapshot file it came from
    contracts: Optional[Mapping[str, Any]] = None  # the static contract analysis (doctor.probe.contracts)
    # each installed package's Requires-Dist on other installed ones (extras left out): what pip
    # holds the environment to after a fix moves a package (doctor.fix.resolve)
    requires: Optional[Mapping[str, Tuple[str, ...]]] = None



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
# Who dispatches attention (the call path's first hop), how a batch is packed, and whose
# context/sequence parallelism splits the sequence.
FRAMEWORKS = (
    "transformers",
    "megatron",
    "nemo",
    "torchtitan",
    "accelerate",
    "deepspeed",
    "unsloth",
    "axolotl",
    "llamafactory",
    "verl",
    "ms-swift",
    "trl",
    "xtuner",
    "diffusers",
    "peft",
    "custom",
)
PACKINGS = ("padded", "varlen", "padding_free")
# Megatron-Core's --attention-backend (TransformerConfig.attention_backend, 0.11+; default auto):
# which NVTE_*_ATTN values it sets, and asserts, when the model is built
ATTENTION_BACKENDS = ("auto", "flash", "fused", "unfused", "local")
# what the training run updates: every weight (full), LoRA adapters on the weights (lora), LoRA on a
# 4-bit quantized model (qlora), or another parameter-efficient adapter (adapter: AdaLoRA, IA3,
# prefix tuning, LLaMA-Pro, ...). Under an adapter the framework hands later code a PEFT or Swift
# wrapper (PeftModelForCausalLM, SwiftModel) instead of the model class (XTUNER-02, XTUNER-09)
FINETUNES = ("full", "lora", "qlora", "adapter")
# the training method a trainer runs: supervised fine-tuning, or a preference / RL method of
# TRL or ms-swift (`swift rlhf --rlhf_type`): rm is a reward model
METHODS = ("sft", "pt", "dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "rloo", "gkd")
# TransformerEngine DotProductAttention(softmax_type=...) (TE >= 2.8), Megatron-Core's
# TransformerConfig.softmax_type / --softmax-type (core 0.15+): off-by-one and learnable add an
# attention sink (a fixed or a learned per-head logit in the softmax denominator, as gpt-oss)
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
DISTRIBUTED = ("ddp", "fsdp", "deepspeed", "megatron")  # how the training loop shards the model (not who runs attention); megatron: Megatron-Core parallelism (e.g. verl's Megatron workers)
CP_IMPLS = ("te", "torch_ring", "ulysses", "ring_flash_attn")
ATTN_IMPLEMENTATIONS = (
    "eager",
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flash_attention_4",
    "flex_attention",
)


@dataclass(frozen=True)
class ContextParallel:
    size: int = 1
    comm_type: str = "p2p"
    impl: Optional[str] = None  # te | torch_ring | ulysses | ring_flash_attn; None: not stated
    # the attention a Ulysses wrapper runs on the gathered heads (DeepSpeed's Hugging Face
    # Ulysses: core_attn_implementation; accelerate: parallelism_config_sp_attn_implementation,
    # which `accelerate launch` defaults to sdpa); None: not stated
    attn_implementation: Optional[str] = None


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
    # the ALiBi slopes are the caller's own: TransformerEngine's DotProductAttention.forward(
    # alibi_slopes=...) given a tensor (TE then hands FusedAttention a post_scale_bias, not the
    # bias type alibi); read only together with alibi: true; None: not stated, read as TE's own
    # default slopes (no probe or config reader sets it)
    alibi_custom_slopes: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    dropout: float = 0.0
    qkv_format: str = "bshd"
    qkv_packed: bool = False
    varlen: bool = False
    training: bool = True
    deterministic: bool = False
    fp8: bool = False
    kv_cache: bool = False  # a KV cache is in use (TE: inference_params given), prefill or decode
    # that KV cache is paged (TE: InferenceParams(is_paged=True), qkv layout paged_kv_*); read only
    # together with kv_cache: true
    paged_kv_cache: bool = False
    sdpa_fa3: bool = False  # torch.nn.attention.activate_flash_attention_impl("FA3") was called (torch >= 2.10; 2.10 registers only FA4, so there the call raises)
    fp8_recipe: Optional[str] = None  # the recipe given to TE's autocast (FP8_RECIPES); None: not stated
    distributed: Optional[str] = None  # ddp, fsdp or deepspeed; None: not stated
    grad_accum_steps: int = 1  # gradient accumulation steps
    xformers: bool = False  # the code turns xformers' attention on (diffusers: enable_xformers_memory_efficient_attention())
    pad_between_seqs: bool = False  # thd batches with padding between sequences (TE: cu_seqlens_*_padded != cu_seqlens_*)
    context_parallel: ContextParallel = field(default_factory=ContextParallel)
    attn_implementation: Optional[str] = None
    framework: Optional[str] = None  # who dispatches attention; None: not stated
    model_type: Optional[str] = None  # config.json model_type (qwen2, llama, ...)
    # config.json text_config.model_type: the family of a wrapper's language model (qwen2 inside
    # llava); None: no text_config read and not stated
    text_model_type: Optional[str] = None
    # the model has a vision tower: its config.json has a `visual` (Qwen-VL) or `vision_config`
    # section; None: not known (no config.json read and not stated)
    vision_tower: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # the checkpoint ships its own modeling code for AutoModelForCausalLM (config.json auto_map), which
    # a loader given trust_remote_code=True builds instead of transformers' classes (XTuner's configs
    # pass it); None: not known (no config.json read and not stated)
    remote_code: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # TransformerEngine's MultiheadAttention/TransformerLayer qkv_weight_interleaved (default True,
    # but forced False unless fuse_qkv_params=True, itself False by default): True splits a fused
    # QKV into t/sb/bs-h3d views, False gives t/sb/bs-3hd; None: not stated, so not known
    qkv_weight_interleaved: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # config.json's sliding_window when its use_sliding_window is false (the config turns the
    # window off but keeps its length; some transformers releases apply it anyway)
    unused_sliding_window: Optional[int] = None
    packing: str = "padded"  # padded | varlen | padding_free
    # tensor-parallel size (Megatron/NeMo): attention modules see num_heads/tp and num_kv_heads/tp
    tensor_parallel: int = 1
    # Megatron-Core/NeMo --attention-backend (ATTENTION_BACKENDS); None: not stated
    attention_backend: Optional[str] = None
    # Megatron-Core 0.19+ --flash-attention-version (2, 3 or 4): the model build sets
    # NVTE_FLASH_ATTN_V{other}=0, asserting any exported value equals that; None: not stated
    flash_attention_version: Optional[int] = None
    # Megatron-LM --use-legacy-models (Megatron-Core 0.11-0.17): megatron.legacy's GPT/BERT/T5
    # models, built without LanguageModule, so without Megatron-Core's check and setting of the
    # NVTE_*_ATTN variables (--attention-backend is not read); False: Megatron-Core's models
    legacy_models: bool = False
    # the use_cache a training forward runs with (from_pretrained/config use_cache, or passed to
    # the forward); None: not stated, so the model config's default (true in most checkpoints)
    use_cache: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # ModernBERT's config.deterministic_flash_attn (transformers 4.48+): the `deterministic` its
    # flash-attention call passes itself, in place of FLASH_ATTENTION_DETERMINISTIC; None: not
    # stated, so the config's default False (configuration_modernbert.py)
    deterministic_flash_attn: Optional[bool] = None
    # gradient checkpointing is on (TrainingArguments/axolotl gradient_checkpointing); a
    # transformers model in training then runs its forward with use_cache=False; None: not stated
    gradient_checkpointing: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # the framework runs torch.compile over the model (torchtitan's per-TransformerBlock compile:
    # [training] compile in 0.1.0, [compile] enable with "model" in components from 0.2.0); an
    # outer compile inlines a compiled flex_attention and drops its own mode (pytorch#156308);
    # None: not stated
    model_compile: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # the KV cache is a compilable (static) one: StaticCache or generate's cache_implementation
    # "static" (and the other fixed-size caches transformers marks is_compileable), as compiled
    # generate uses; transformers then hands SDPA a mask tensor instead of is_causal; None: not
    # stated
    static_cache: Optional[bool] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # full fine-tuning or an adapter (FINETUNES); None: not stated, so not known
    finetune: Optional[str] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # the training method (METHODS): sft, pt (pre-training), or a preference / RL method (dpo,
    # grpo, ...); None: not stated, so not known
    method: Optional[str] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # the attention softmax TE is asked for (SOFTMAX_TYPES): vanilla, or a sink softmax
    # (off-by-one, learnable); None: not stated, so not known
    softmax_type: Optional[str] = None  # in WORKLOAD_UNKNOWN_WHEN_NONE
    # What an axolotl config says about attention in axolotl's own terms, for axolotl's own config
    # checks, which read different keys per release (the config reader sets them; None: no axolotl
    # config read and not stated). axolotl_attn: the attn_implementation axolotl 0.17+ resolves, the
    # `attn_implementation:` value as written (a Hub-kernel path or axolotl's own backend included),
    # else the first legacy flag set in axolotl's priority (xformers, sage, flex, flash, sdp, eager:
    # 0.17.0 utils/schemas/enums.py:116-123), else "none"; "conflict" where both are given (0.17+
    # refuse that at config load, config.py:1465-1470). axolotl_flash_flag: `flash_attention: true`
    # is set (the one key 0.8-0.16's context-parallel check reads). axolotl_glm_dsa:
    # `use_glm_dsa_kernels: true` with the kernels plugin listed (0.18+ skip that check for it)
    axolotl_attn: Optional[str] = None
    axolotl_flash_flag: Optional[bool] = None
    axolotl_glm_dsa: Optional[bool] = None
    # axolotl_flags: the legacy boolean attention keys the axolotl config sets true, comma-joined in
    # _AXOLOTL_FLAG_KEYS order (doctor/configs.py), or "none": 0.8.1-0.16 refuse more than one of
    # them at config load (check_attention_fields), each release its own set
    axolotl_flags: Optional[str] = None
    # axolotl_unsloth: the unsloth_* options the axolotl config sets true, comma-joined in
    # _AXOLOTL_UNSLOTH_KEYS order (doctor/configs.py), or "none": 0.6-0.16 load
    # monkeypatch/unsloth_.py for them (0.17.0 removed the options)
    axolotl_unsloth: Optional[str] = None
    source: str = "default profile"
    defaulted: Tuple[str, ...] = ()

    @property
    def shape_given(self) -> bool:
        """The user said something about the attention shape (else it is the default profile's)."""
        return any(k not in self.defaulted for k in ("head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "seq_len_q", "seq_len_kv"))

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
    def cp_impl(self) -> Optional[str]:
        return self.context_parallel.impl if self.context_parallel.size > 1 else None

    @property
    def cp_attn_implementation(self) -> Optional[str]:
        """The attention the sequence-parallel wrapper runs (context_parallel.attn_implementation)."""
        return self.context_parallel.attn_implementation if self.context_parallel.size > 1 else None

    @property
    def cp_core_attn(self) -> Optional[str]:
        """The attention DeepSpeed's Hugging Face Ulysses is told to wrap: the stated
        context_parallel.attn_implementation, else the model's attn_implementation (what a caller
        of register_with_transformers normally passes as core_attn_implementation)."""
        if self.context_parallel.size <= 1:
            return None
        return self.context_parallel.attn_implementation or self.attn_implementation

    @property
    def cp_attn_differs(self) -> bool:
        """The wrapper's attention and the model's attn_implementation are both stated and differ
        (DeepSpeed 0.19.0+ refuses that; before, an eager model bypasses the wrapper)."""
        a, b = self.cp_attn_implementation, self.attn_implementation
        return a is not None and b is not None and a != b

    @property
    def sliding_window(self) -> bool:
        """A window that bounds the keys: not (-1, -1) and not (-1, 0), which is plain causal
        attention (TransformerEngine sets it for every causal mask and does not count it as a
        sliding window: attention.py@v1.11:645-653; flash-attn runs it as causal)."""
        w = self.window_size
        return w is not None and (w[0] != -1 or w[1] not in (-1, 0))

    def _window_left(self) -> Optional[int]:
        """window_size[0] when a sliding window is set (-1: unbounded on the left), else None."""
        w = self.window_size
        return w[0] if w is not None and tuple(w) != (-1, -1) else None

    @property
    def window_shorter_than_seq(self) -> bool:
        """A left window that leaves keys out: window_size[0] + 1 keys (the key itself and the
        window_size[0] before it) are fewer than seq_len_kv. False without a window."""
        left = self._window_left()
        return left is not None and left >= 0 and self.seq_len_kv > left + 1

    @property
    def unused_window_shorter_than_seq(self) -> bool:
        """The config's switched-off sliding_window (unused_sliding_window keys per query, were it
        applied) is shorter than seq_len_kv. False without one."""
        return self.unused_sliding_window is not None and self.seq_len_kv > self.unused_sliding_window

    @property
    def unused_window_plus_one_shorter_than_seq(self) -> bool:
        """The same for a mask that keeps unused_sliding_window + 1 keys per query (transformers
        4.39-4.41's AttentionMaskConverter): seq_len_kv is above window + 1. False without one."""
        return self.unused_sliding_window is not None and self.seq_len_kv > self.unused_sliding_window + 1

    @property
    def window_longer_than_seq(self) -> bool:
        """A window that leaves no key out with room to spare: seq_len_kv is at most window_size[0]
        (fewer keys than the window_size[0] + 1 it spans), transformers' kv_length < sliding_window
        test for skipping the SDPA mask. False without a window; True for an unbounded left side."""
        left = self._window_left()
        return left is not None and (left < 0 or self.seq_len_kv <= left)

    @property
    def seq_len_kv_rank(self) -> int:
        """The keys one rank's model forward sees: under torch context parallelism (cp_impl
        torch_ring) the caller shards input_ids as a context_parallel buffer before the forward
        (accelerate 1.10 maybe_context_parallel, transformers 4.57.1 Trainer
        _prepare_context_parallel_inputs), so the model and its mask builder see
        ceil(seq_len_kv / cp_size) tokens (the longest shard); seq_len_kv otherwise."""
        if self.cp_impl == "torch_ring":
            return -(-self.seq_len_kv // self.context_parallel.size)
        return self.seq_len_kv

    @property
    def window_longer_than_rank_seq(self) -> bool:
        """window_longer_than_seq on the keys one rank's forward sees (seq_len_kv_rank): the
        kv_length < sliding_window test with which transformers (4.40+ _ignore_causal_mask_sdpa,
        4.57.1 masking_utils) skips the SDPA mask. Under torch context parallelism a window longer
        than the shard but shorter than the sequence builds no mask, and ring attention then runs
        plain causal attention over the whole sequence. Equals window_longer_than_seq without it."""
        left = self._window_left()
        return left is not None and (left < 0 or self.seq_len_kv_rank <= left)

    @property
    def bottom_right(self) -> bool:
        return self.mask.endswith("bottom_right")

    @property
    def causal(self) -> bool:
        return "causal" in self.mask

    @property
    def padding(self) -> bool:
        return self.mask.startswith("padding")

    @property
    def q_longer_than_kv(self) -> bool:
        return self.seq_len_q > self.seq_len_kv

    @property
    def kv_longer_than_q(self) -> bool:
        return self.seq_len_kv > self.seq_len_q

    # Sequence parallelism splits heads (Ulysses all-to-all) and the sequence over cp_size ranks.
    @property
    def cp_heads_divisible(self) -> bool:
        return self.num_heads % self.context_parallel.size == 0

    @property
    def cp_kv_heads_divisible(self) -> bool:
        return self.num_kv_heads % self.context_parallel.size == 0

    @property
    def score_elements(self) -> int:
        """batch x the query heads of one tensor-parallel rank x seq_len_q x seq_len_kv: the
        attention-score matrix TE's DotProductAttention sees (TE 2.19+ compares
        batch_size * num_heads * max_seqlen_q * max_seqlen_kv with 2**30 for its deterministic THD
        backward on sm90, num_heads being query_layer's local heads under Megatron/NeMo TP)."""
        return self.batch_size * self.tp_local_heads * self.seq_len_q * self.seq_len_kv

    @property
    def cp_heads_below_size(self) -> bool:
        """Fewer query heads than context/sequence-parallel ranks: some rank gets no head."""
        return self.num_heads < self.context_parallel.size

    @property
    def cp_kv_heads_below_size(self) -> bool:
        """Fewer key/value heads than context/sequence-parallel ranks."""
        return self.num_kv_heads < self.context_parallel.size

    @property
    def cp_one_head_per_rank(self) -> bool:
        """Exactly as many query heads as context/sequence-parallel ranks: each rank holds one head
        after the all-to-all (DeepSpeed 0.14.4's misplaced axis swap is then harmless)."""
        return self.num_heads == self.context_parallel.size

    @property
    def cp_kv_heads_repeatable(self) -> bool:
        """kv heads split evenly over the ranks, or each rank can hold whole repeated kv heads."""
        size = self.context_parallel.size
        return self.num_kv_heads % size == 0 or size % self.num_kv_heads == 0

    @property
    def cp_local_heads_divisible(self) -> bool:
        """After the first all-to-all each rank holds num_heads/cp_size heads; is that count itself
        divisible by cp_size (DeepSpeed 0.15.4-0.16.1 mistake the second all-to-all for an
        uneven-heads one when it is not)?"""
        size = self.context_parallel.size
        return (self.num_heads // size) % size == 0

    # Heads of one tensor-parallel rank: what TE's DotProductAttention sees under Megatron/NeMo
    # tensor parallelism (kv heads fewer than ranks are replicated, one per rank)
    @property
    def tp_local_heads(self) -> int:
        return max(1, self.num_heads // self.tensor_parallel)

    @property
    def batch_heads(self) -> int:
        """batch x the query heads of one tensor-parallel rank: the thread count torch 2.0's SDPA
        priority_order gives FlashAttention (it tries memory-efficient attention first below 60
        when seq_len_q >= 128)."""
        return self.batch_size * self.tp_local_heads

    @property
    def queries_per_batch_head(self) -> int:
        """seq_len_q // batch_heads: torch 2.1's SDPA priority_order tries memory-efficient
        attention first in training when 6 x batch x heads > seq_len_q, i.e. when this is below 6."""
        return self.seq_len_q // max(self.batch_heads, 1)

    @property
    def flex_decode_rows(self) -> int:
        """seq_len_q x the query heads per key/value head: the most query rows torch's
        flex_decoding kernel tiles for one key/value head (with enable_gqa=True; a caller that
        repeats the key/value heads first hands it seq_len_q rows). Its tile is this rounded up
        to a power of two, at least 16, so a value of 16 or less takes the smallest tile."""
        return self.seq_len_q * max(1, self.num_heads // max(self.num_kv_heads, 1))

    @property
    def gqa_group_pow2(self) -> bool:
        """The query heads per key/value head are a whole power of two (1 included): torch 2.9+'s
        flex_decoding takes a grouped query only then (kernel/flex/flex_decoding.py@2.9.0
        _use_flex_decoding); other groups compile the flex_attention forward for a short query."""
        if self.num_kv_heads <= 0 or self.num_heads % self.num_kv_heads:
            return False
        group = self.num_heads // self.num_kv_heads
        return group & (group - 1) == 0

    @property
    def heads_pow2(self) -> bool:
        """num_heads is a power of two: transformers 4.51+ repeats the key/value heads itself
        (enable_gqa off) when it is not (integrations/flex_attention.py@4.51.0:210-217)."""
        return self.num_heads > 0 and self.num_heads & (self.num_heads - 1) == 0

    @property
    def fa4_sm12x_fwd_smem(self) -> int:
        """Shared memory (bytes) of flash-attn-4's forward tile on compute capability 12.x: 128 query
        rows by 64 keys above head_dim_qk 64, else 128 by 128, one stage, bf16/fp16 Q, K and V
        tiles with head dims padded to 16 (4.0.0b36 flash_attn/cute/interface.py:360-364; sample 50
        part 2 and check 2)."""
        qk = -(-self.head_dim_qk // 16) * 16
        v = -(-self.head_dim_v // 16) * 16
        return 384 * qk + 128 * v if self.head_dim_qk > 64 else 512 * qk + 256 * v

    @property
    def fa4_sm12x_bwd_smem(self) -> int:
        """Shared memory (bytes) of flash-attn-4's backward on compute capability 12.x: 64x64 tiles,
        one Q/dO stage above head_dim_qk 64 and two up to 64, head dims padded to 32, bf16/fp16 Q,
        K, V, dO, P and dS tiles plus fp32 LSE and dPsum rows (4.0.0b36 interface.py:2327-2344,
        flash_bwd.py:72-79 and :333-371; the same at fa4-v4.0.0.beta5/11/20/27)."""
        qk = -(-self.head_dim_qk // 32) * 32
        v = -(-self.head_dim_v // 32) * 32
        return 256 * (qk + v) + 16896 if self.head_dim_qk > 64 else 384 * (qk + v) + 17408

    @property
    def tp_local_kv_heads(self) -> int:
        return max(1, self.num_kv_heads // self.tensor_parallel)

    # DeepSpeed's Ulysses under tensor parallelism (Megatron-DeepSpeed runs both): each rank hands
    # DistributedAttention the heads of its tensor-parallel shard, tp_local_heads, not num_heads
    @property
    def cp_tp_local_heads_divisible(self) -> bool:
        """tp_local_heads divisible by cp_size (the first all-to-all splits them evenly)."""
        return self.tp_local_heads % self.context_parallel.size == 0

    @property
    def cp_tp_local_heads_per_rank_divisible(self) -> bool:
        """(tp_local_heads // cp_size) divisible by cp_size: the head count the output
        all-to-all receives, split again over the ranks."""
        size = self.context_parallel.size
        return (self.tp_local_heads // size) % size == 0

    @property
    def ulysses_kv_heads(self) -> int:
        """The key/value heads DeepSpeed's DistributedAttention receives on one tensor-parallel rank.
        Without tensor parallelism the caller's count (hand-written callers may pass grouped heads);
        with it the caller is Megatron-DeepSpeed, which repeats key/value heads to the query count
        before the all-to-all (megatron/model/transformer.py repeat_kv, a2a476e1 on), so the same
        count as the query heads."""
        return self.num_kv_heads if self.tensor_parallel <= 1 else self.tp_local_heads

    @property
    def cp_tp_local_kv_heads_divisible(self) -> bool:
        """ulysses_kv_heads divisible by cp_size."""
        return self.ulysses_kv_heads % self.context_parallel.size == 0

    @property
    def cp_tp_local_heads_below_size(self) -> bool:
        """Fewer query heads on one tensor-parallel rank than sequence-parallel ranks."""
        return self.tp_local_heads < self.context_parallel.size

    @property
    def cp_tp_local_kv_heads_below_size(self) -> bool:
        """Fewer key/value heads reaching DistributedAttention (ulysses_kv_heads) than ranks."""
        return self.ulysses_kv_heads < self.context_parallel.size

    @property
    def cp_tp_local_one_head_per_rank(self) -> bool:
        """One query head per rank after the all-to-all, counting one tensor-parallel rank's heads."""
        return self.tp_local_heads == self.context_parallel.size

    @property
    def ulysses_gqa(self) -> bool:
        """Grouped key/value heads still grouped when they reach DistributedAttention."""
        return self.ulysses_kv_heads != self.tp_local_heads

    @property
    def cp_seq_divisible(self) -> bool:
        size = self.context_parallel.size
        return self.seq_len_q % size == 0 and self.seq_len_kv % size == 0

    @property
    def cp_seq_len_q_padded(self) -> int:
        """seq_len_q rounded up to a multiple of cp_size (a fix that pads the sequence)."""
        size = max(self.context_parallel.size, 1)
        return -(-self.seq_len_q // size) * size

    @property
    def cp_seq_len_kv_padded(self) -> int:
        """seq_len_kv rounded up to a multiple of cp_size (a fix that pads the sequence)."""
        size = max(self.context_parallel.size, 1)
        return -(-self.seq_len_kv // size) * size

    @property
    def cp_seq_divisible_2x(self) -> bool:
        """The query sequence cuts into 2 x cp_size equal chunks: torch's context_parallel()
        asserts it when load balancing is on (2.6-2.12), and from 2.13 turns load balancing off
        for the call when it does not hold."""
        return self.seq_len_q % (2 * max(self.context_parallel.size, 1)) == 0

    @property
    def cp_kv_local_divisible_2x(self) -> bool:
        """One rank's key length (seq_len_kv / cp_size) cuts into 2 x cp_size equal chunks: TE 1.9's
        context parallelism views a rank-local attention bias's key axis that way (v1.9
        attention.py:1241-1252), and the view raises where it does not."""
        size = max(self.context_parallel.size, 1)
        return self.seq_len_kv % size == 0 and (self.seq_len_kv // size) % (2 * size) == 0

    @property
    def tp_cp_seq_divisible(self) -> bool:
        """The query sequence is a multiple of tensor_parallel x 2 x cp_size: torchtitan 0.2's
        model parallelize functions assert it on training.seq_len (ParallelDims.seq_len_divisor)."""
        return self.seq_len_q % (max(self.tensor_parallel, 1) * 2 * max(self.context_parallel.size, 1)) == 0

    @property
    def cp_chunk_len_q(self) -> int:
        """The query chunk of TE's load-balanced context parallelism: the sequence cut into
        2 x cp_size chunks (its all_gather steps run max_seqlen_q // (2 * cp_size) queries)."""
        return self.seq_len_q // (2 * max(self.context_parallel.size, 1))

    @property
    def cp_chunk_len_kv(self) -> int:
        """The key/value chunk of the same split; each all_gather step takes a whole number of them."""
        return self.seq_len_kv // (2 * max(self.context_parallel.size, 1))


WORKLOAD_DERIVED = (
    "mla",
    "gqa",
    "cross_attention",
    "head_dim_max",
    "cp_size",
    "cp_comm_type",
    "cp_impl",
    "cp_attn_implementation",
    "cp_core_attn",
    "cp_attn_differs",
    "sliding_window",
    "window_shorter_than_seq",
    "unused_window_shorter_than_seq",
    "unused_window_plus_one_shorter_than_seq",
    "window_longer_than_seq",
    "seq_len_kv_rank",
    "window_longer_than_rank_seq",
    "bottom_right",
    "causal",
    "padding",
    "q_longer_than_kv",
    "kv_longer_than_q",
    "cp_heads_divisible",
    "cp_kv_heads_divisible",
    "cp_heads_below_size",
    "cp_kv_heads_below_size",
    "cp_one_head_per_rank",
    "score_elements",
    "cp_kv_heads_repeatable",
    "cp_local_heads_divisible",
    "cp_seq_divisible",
    "cp_seq_divisible_2x",
    "cp_kv_local_divisible_2x",
    "tp_cp_seq_divisible",
    "cp_seq_len_q_padded",
    "cp_seq_len_kv_padded",
    "cp_chunk_len_q",
    "cp_chunk_len_kv",
    "tp_local_heads",
    "tp_local_kv_heads",
    "cp_tp_local_heads_divisible",
    "cp_tp_local_heads_per_rank_divisible",
    "ulysses_kv_heads",
    "cp_tp_local_kv_heads_divisible",
    "cp_tp_local_heads_below_size",
    "cp_tp_local_kv_heads_below_size",
    "cp_tp_local_one_head_per_rank",
    "ulysses_gqa",
    "batch_heads",
    "queries_per_batch_head",
    "flex_decode_rows",
    "gqa_group_pow2",
    "heads_pow2",
    "fa4_sm12x_fwd_smem",
    "fa4_sm12x_bwd_smem",
)
# workload fields whose None means "not known" rather than a value a rule can compare with:
# a rule that reads one is then not evaluated (the others' None means "not stated", a value)
WORKLOAD_UNKNOWN_WHEN_NONE = ("alibi_custom_slopes", "vision_tower", "remote_code", "qkv_weight_interleaved", "use_cache", "gradient_checkpointing", "model_compile", "static_cache", "finetune", "method", "softmax_type")

# --------------------------------------------------------------------------- rule results

class Severity(str, Enum):
    """How bad a finding is, ordered: ERROR < WARNING < INFO in `sorted` (worst first).
    Compares equal to its text ("error"), so JSON and YAML read and write it as a string."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self.value]

    def at_least(self, threshold: "Severity") -> bool:
        """As bad as `threshold` or worse."""
        return self.rank <= threshold.rank

    def __lt__(self, other: object) -> bool:  # worst first
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
SEVERITIES = tuple(s.value for s in Severity)

# fired | not_evaluated from the rules; after kernels: confirmed | refuted | not_run
FindingStatus = Literal["fired", "not_evaluated", "confirmed", "refuted", "not_run"]
FINDING_STATUSES: Tuple[str, ...] = ("fired", "not_evaluated", "confirmed", "refuted", "not_run")


@dataclass(frozen=True, order=True)
class Pin:
    """`name==version` as a value: the canonical (PEP 503) name, the version, and extras
    (`transformer-engine[pytorch]==2.1.0`). doctor.versions.parse_pin reads one."""

    name: str
    version: str
    extras: Tuple[str, ...] = ()

    def __str__(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


@dataclass(frozen=True)
class Fix:
    """One way to clear a finding: pins, environment settings, workload (configuration)
    changes the doctor can re-check, and config advice it can only print."""

    description: str
    pins: Tuple[Pin, ...] = ()
    env: Mapping[str, Optional[str]] = field(default_factory=dict)  # None: unset the variable
    config: Tuple[str, ...] = ()
    workload: Mapping[str, Any] = field(default_factory=dict)  # workload keys it changes
    cost: Optional[str] = None
    # where the fix applies (a rule condition; None: everywhere). A fix whose condition is false
    # for these facts is not offered; `unsure` names the facts that left it undecided (offered).
    when: Optional[Mapping[str, Any]] = None
    unsure: Tuple[str, ...] = ()
    position: int = 0  # its place among the rule's fixes (a test case's `offers:` names these)
    verified: Optional[bool] = None  # True: re-checking with it applied clears the finding
    brings_up: Tuple[str, ...] = ()  # warnings that fire only with it applied (doctor.fix.recheck)
    # installed packages pip would move to satisfy its pins ("transformers 4.57.1 -> 4.55.4";
    # doctor.fix.recheck.pip_moves), re-checked with them moved
    moves: Tuple[str, ...] = ()
    planned: bool = False  # the change `attn-doctor fix` plans for this finding

    @property
    def checkable(self) -> bool:
        """Something the doctor can apply and re-check (not only advice)."""
        return bool(self.pins or self.env or self.workload)


# Where in a run a finding's failure shows, earliest first. A finding at an earlier stage stops
# the run before a later one can happen, so the report lists the later one "behind" it: true,
# but only reached once the earlier one is fixed (docs/rules.md, "Stages").
@dataclass(frozen=True)
class Stage:
    name: str  # the rule file's `stage:` value
    when: str  # "at import": completes "this shows ... once that is fixed"
    description: str


STAGES: Tuple[Stage, ...] = (
    Stage("install", "at install", "the environment cannot be installed as stated (no wheel, a resolver conflict)"),
    Stage("import", "at import", "importing a package of the stack fails"),
    Stage("setup", "at start-up", "the script refuses before the model runs (arguments, config, model load, attention checks)"),
    Stage("driver", "when CUDA starts", "CUDA starts at the first use of the GPU and fails (the driver is too old for torch's CUDA)"),
    Stage("device", "at the first CUDA kernel", "the first CUDA kernel of the run fails (no kernel image for this GPU)"),
    Stage("step", "in the first training or inference step", "attention in the first forward or backward step raises or crashes"),
    Stage("numbers", "in the results", "the run goes on, with wrong numbers or a silently changed computation"),
)
STAGE_BY_NAME: Dict[str, Stage] = {st.name: st for st in STAGES}
STAGE_RANK: Dict[str, int] = {st.name: i for i, st in enumerate(STAGES)}


def stage_ordered(a: Optional[str], b: Optional[str]) -> bool:
    """Two findings whose stages say which one the run reaches first: the report lists the
    later one behind the earlier, so they need no `alongside:` or reading of each other."""
    return bool(a and b and STAGE_RANK[a] != STAGE_RANK[b])


@dataclass(frozen=True)
class Finding:
    rule_id: str
    severity: Severity
    title: str
    message: str  # rendered for these facts and this workload
    status: FindingStatus
    fixes: Tuple[Fix, ...] = ()
    sources: Tuple[str, ...] = ()
    missing: Tuple[str, ...] = ()  # facts that were unknown (status not_evaluated)
    area: str = "general"
    kernels: Tuple[str, ...] = ()  # kernel case ids that test this prediction
    evidence: Tuple[str, ...] = ()  # what the kernels saw
    stage: Optional[str] = None  # where in the run it shows (STAGES); None: not stated
    behind: Tuple[str, ...] = ()  # error findings at an earlier stage that stop the run first


@dataclass(frozen=True)
class BackendStatus:
    id: str  # "te.fused"
    framework: str  # "transformer-engine"
    name: str  # "FusedAttention (cuDNN)"
    available: Optional[bool]  # None: could not decide (unknown facts)
    reasons: Tuple[str, ...] = ()  # why it is out (or why availability is unknown)
    selected: bool = False  # the one this framework would pick for the workload
    rule_ids: Tuple[str, ...] = ()
    rule_reasons: Tuple[Tuple[str, str], ...] = ()  # (rule id, what it says) for each rule that put it out
    # out (available False), but some of its other rules could not be decided: what they lacked
    # (a fix that only lifts the fired rules may or may not bring the backend back)
    undecided: Tuple[str, ...] = ()
    evidence: Tuple[str, ...] = ()  # what kernel cases saw for this backend
    members: Tuple["BackendStatus", ...] = ()  # a family's sub-backends (te.flash: FA2, FA3, FA4)
    # set when the framework's install is older than the catalogue covers (`covers:`): why nothing
    # about this backend was decided (available is then None)
    not_covered: Optional[str] = None


CALL_PATH_FIELDS = ("framework", "attention", "library", "cp_impl", "packing", "model_type", "model_supports", "model_has_fa2", "model_has_sdpa", "model_in_transformers", "needs_mask", "packed_mask", "static_cache_mask", "model_mask", "no_packed_search", "default_sdpa", "default_attention", "gqa_form", "te_attention", "flash_attn_direct", "megatron_core", "mcore_adapter", "unsloth_own_family")


@dataclass(frozen=True)
class CallPath:
    """Who runs attention, from the framework to the kernel (doctor.rules.callpath infers it)."""

    framework: Optional[str]
    attention: Optional[str]
    library: Optional[str]
    cp_impl: str
    packing: str
    model_type: Optional[str]
    inferred: Tuple[str, ...] = ()
    # does transformers (this release) let model_type load with this attention? None: not known
    model_supports: Optional[bool] = None
    # does model_type declare flash_attention_2 in this transformers release (whatever attention
    # was asked for)? Before 4.48 only such model modules import flash_attn at import time
    model_has_fa2: Optional[bool] = None
    # the same for sdpa: can a fix that switches this model to SDPA load it?
    model_has_sdpa: Optional[bool] = None
    # does this transformers release know model_type (its models/<family> folder)? False only where
    # the support table shows the family first in a later release than this one (and later than the
    # table's first release), so AutoConfig cannot build it without remote code; None: not known
    # (no model_type, a family outside the table such as remote-code Baichuan/Qwen-1, no release)
    # (doctor.releases.model_support.model_in_release)
    model_in_transformers: Optional[bool] = None
    needs_mask: bool = False  # the call passes an attention-mask tensor (padded batches)
    # transformers' SDPA path turns a padding-free packed batch into a per-sample mask tensor
    # (from 4.53.1; doctor.rules.callpath.hf_padding_free_mask says exactly when)
    packed_mask: bool = False
    # transformers' SDPA call gets a mask tensor because the KV cache is a static (compilable) one
    # (4.38 on; doctor.rules.callpath.hf_static_cache_mask says exactly when)
    static_cache_mask: bool = False
    # transformers' model code hands SDPA a 4-D mask tensor on every forward, padded or not
    # (Gemma-2, Cohere2, Gemma-3 before 4.53, Falcon from 5.2; doctor.rules.callpath.hf_model_mask says exactly when)
    model_mask: bool = False
    # the model family's code never lets transformers (4.53.1 or later) search position_ids for
    # packed samples, in any attention (doctor.rules.callpath.hf_model_skips_packed_search)
    no_packed_search: bool = False
    # no library decided yet (the backend pass) but a stated HF framework with no attn_implementation
    # will call transformers' default SDPA (doctor.rules.callpath.default_attention says exactly when)
    default_sdpa: bool = False
    # the attn_implementation a transformers-based framework (stated or inferred) loads the model
    # with when none is stated: sdpa, eager or flash_attention_2; None where one is stated or the
    # framework is not one (doctor.rules.callpath.default_attention)
    default_attention: Optional[str] = None
    # how grouped-query attention reaches the kernel: none | native (the kernel takes fewer kv
    # heads) | enable_gqa (torch SDPA's flag) | repeat_kv (kv heads copied up first); None: unknown
    gqa_form: Optional[str] = None
    # may TE's DotProductAttention run attention here? False where the workload STATES another
    # attention (an HF attn_implementation) or a framework that never calls TE's attention, unless
    # the model is one of NVIDIA's TE-built remote-code models (model_type nv_*). Stated facts only:
    # an inferred framework or library would hide Megatron run from a source checkout.
    te_attention: bool = True
    # may code call flash-attn's own functions here (custom code, Megatron-DeepSpeed's
    # FlashSelfAttention, XTuner's dispatch)? False where the workload STATES an attn_implementation
    # or a framework that chooses attention itself (transformers and the trainers on it default to
    # SDPA; torchtitan; Megatron-Core/NeMo go through TE). Stated facts only, like te_attention.
    flash_attn_direct: bool = True
    # do Megatron-Core's layers build the model and call attention (its TEDotProductAttention, or its
    # own DotProductAttention with --attention-backend local)? Megatron-LM and NeMo (stated or
    # inferred from an installed megatron-core / nemo-toolkit), Megatron-Core parallelism under any
    # trainer (distributed: megatron: verl's and ms-swift's Megatron workers), LLaMA-Factory 0.9.4+'s
    # USE_MCA route through mcore_adapter. What Megatron-Core does before TE (the thd padding mask,
    # its own KV cache, MLA's V padding) holds on all of these (doctor.rules.callpath.megatron_core)
    megatron_core: bool = False
    # is a `mcore_adapter` module importable (ROLL's, which LLaMA-Factory's USE_MCA route imports)?
    # The probe's finding where it looked (present/missing); else an installed distribution other
    # than PyPI's unrelated mcore-adapter 0.0.1 (doctor.rules.callpath.mcore_adapter_importable)
    mcore_adapter: bool = False
    # is the model a family Unsloth's own loaders patch (FastLanguageModel hands llama, mistral, gemma,
    # gemma2, qwen2 and, from unsloth 2025.4.2, qwen3 to FastLlamaModel and the classes built on it)?
    # None where no model_type is stated (or qwen3 with unsloth's release unknown): a value rules
    # compare (eq true/false are then false), not an unknown fact. Whether the load
    # takes that route is the unsloth_own_attention condition's (doctor.rules.callpath.unsloth_own_family)
    unsloth_own_family: Optional[bool] = None
    # fields whose value is not known (a None here means "not known", not "none"), with why:
    # the model-support flags of a family or release the support table lacks, and the framework
    # when none is stated and the installed packages were not probed
    unknown: Tuple[Tuple[str, str], ...] = ()

    def why_unknown(self, name: str) -> Optional[str]:
        """Why field `name` is not known, or None where its value (None included) is the fact."""
        return next((why for field, why in self.unknown if field == name), None)

    def describe(self, packages: Optional[Mapping[str, str]] = None) -> str:
        """One line: `transformers 4.44.2 (qwen2) -> flash_attention_2 -> flash-attn 2.6.3 varlen; CP: none`."""
        pk = packages or {}
        if self.framework is None and self.library is None:
            return f"not known: no framework that dispatches attention is installed or given (--framework, --config); CP: {self.cp_impl}"

        def versioned(name: Optional[str], dist: Optional[str] = None) -> str:
            if name is None:
                return "framework unknown"
            v = pk.get(dist or name)
            return f"{name} {v}" if v else name

        fw_dist = {"llamafactory": "llamafactory", "nemo": "nemo-toolkit", "megatron": "megatron-core"}.get(self.framework or "", self.framework)
        head = versioned(self.framework, fw_dist) + (f" ({self.model_type})" if self.model_type else "")
        lib_dist = {"torch-sdpa": "torch", "flex": "torch", "eager": None}.get(self.library or "", self.library)
        lib = versioned(self.library, lib_dist) if lib_dist else (self.library or "unknown")
        hops = [head] + ([self.attention] if self.attention else []) + [lib + (f" {self.packing}" if self.packing != "padded" else "")]
        text = " -> ".join(hops) + f"; CP: {self.cp_impl}"
        if self.inferred:
            text += f" (inferred: {', '.join(self.inferred)})"
        return text


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
    call_path: Optional[CallPath] = None  # who runs attention
    notes: Tuple[str, ...] = ()  # where inputs came from (--config files) and what they lacked
    hosts: Tuple[HostResult, ...] = ()  # fleet view: every snapshot's own result
