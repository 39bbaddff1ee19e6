"""The attention modules the probe tries to import, and which distributions provide them."""

from __future__ import annotations

from typing import Mapping, Tuple

IMPORTS: Tuple[str, ...] = (
    "flash_attn",
    "flash_attn_2_cuda",
    "flash_attn_interface",  # FlashAttention-3 (hopper)
    "flash_attn.cute",  # FlashAttention-4
    "transformer_engine",
    "transformer_engine.pytorch",
    "xformers",
)

# Modules only looked for on sys.path, never imported: their presence tells releases apart where
# the version an install reports does not (XTuner 1.x installed from its tags reports 0.2.0, the
# version in its xtuner/version.py, and is the only one with the xtuner.v1 package). Their import
# status is "present" or "missing". mcore_adapter: ROLL's
# package, which LLaMA-Factory's USE_MCA route imports; PyPI's `mcore-adapter` 0.0.1 is an unrelated
# project whose folder (`mcore-adapter`) no import reaches, so the distribution alone says nothing.
# flash_attn_3.flash_attn_interface: where TransformerEngine's and Megatron-Core's FlashAttention-3
# import looks; a hopper/ build installs flash_attn_interface only at the top level, and TE's
# install steps copy it into flash_attn_3/ by hand.
PRESENCE_ONLY: Tuple[str, ...] = ("xtuner.v1", "flash_attn_3", "mcore_adapter", "flash_attn_3.flash_attn_interface")

# module -> distributions whose presence means the import is worth trying (and whose version
# the decoder quotes in a fix)
IMPORT_DISTS: Mapping[str, Tuple[str, ...]] = {
    "flash_attn": ("flash-attn",),
    "flash_attn_2_cuda": ("flash-attn",),
    # flashattn-hopper: the hopper/ builds of 2.6.2-2.7.2.post1 install flash_attn_interface too
    "flash_attn_interface": ("flash-attn-3", "flash-attn", "flashattn-hopper"),
    "flash_attn.cute": ("flash-attn-4",),
    "transformer_engine": ("transformer-engine", "transformer-engine-torch"),
    "transformer_engine.pytorch": ("transformer-engine-torch", "transformer-engine"),
    "xformers": ("xformers",),
}

# torch facts only the child process can know
TORCH_LOADED_FACTS: Tuple[str, ...] = (
    "cxx11_abi",
    "cuda_available",
    "device_count",
    "arch_list",
    "cudnn_version",
)
