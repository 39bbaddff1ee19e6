"""The release catalogue: the real releases the doctor may pin (rules/releases/*.json).

    catalogue.py   reading it: versions, Pythons, torch bundles (CUDA, cuDNN), flash-attn wheels
    refresh.py     `attn-doctor releases refresh`: asking the package index for new releases
    wheels.py      which prebuilt flash-attn wheel fits a torch build, or why none does (fix and
                   the rules' wheels.* facts both ask it)
    model_support.py which attention implementations a transformers model family declares, by release
    wheel_assets.py `attn-doctor releases wheels`: flash-attn wheel rows from a release's real assets
"""
