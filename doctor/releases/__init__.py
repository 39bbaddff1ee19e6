"""The release catalogue: the real releases the doctor may pin (rules/releases/*.json).

    catalogue.py   reading it: versions, Pythons, torch bundles (CUDA, cuDNN), flash-attn wheels
    refresh.py     `attn-doctor releases refresh`: asking the package index for new releases
"""
