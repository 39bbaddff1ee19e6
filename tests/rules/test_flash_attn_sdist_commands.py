"""flash-attn is published on PyPI as an sdist whose setup.py imports torch (v2.8.3 setup.py:22, no
pyproject.toml): a `pip install flash-attn==X` that a rule prints for the user to run needs
--no-build-isolation, or pip's isolated build env fails with "No module named 'torch'"
(Dao-AILab/flash-attention#1920, #1421; audit sample 27 row 26)."""

from __future__ import annotations

import re

from doctor.rules.loader import load_catalogue

CAT = load_catalogue(use_cache=False)

# "pip install ... flash-attn==" / "flash_attn==", not flash-attn-4 (a wheel) nor a local wheel file
_FA_INSTALL = re.compile(r"pip install [^;/]*?\bflash[-_]attn==")


def test_every_printed_flash_attn_install_disables_build_isolation() -> None:
    bad = []
    for rule in CAT.rules:
        for i, fix in enumerate(rule.fixes):
            for line in fix.config:
                for m in _FA_INSTALL.finditer(line):
                    command = line[m.start():].split("  ")[0]
                    if "--no-build-isolation" not in command:
                        bad.append(f"{rule.id} fix {i}: {command}")
    assert not bad, bad


def test_fa4_import_fails_second_install_is_followed_by_the_forced_reinstall() -> None:
    rule = next(r for r in CAT.rules if r.id == "FA4-IMPORT-FAILS")
    config = " | ".join(rule.fixes[2].config)
    assert "pip install --no-deps --no-build-isolation --ignore-installed flash-attn==" in config
    # 2.8.3-2.8.3.post2 write their own flash_attn/cute/ over flash-attn-4's files
    assert "2.8.3-2.8.3.post2" in config
    assert "pip install --no-deps --force-reinstall flash-attn-4==" in config
    assert config.index("--ignore-installed flash-attn==") < config.index("--force-reinstall flash-attn-4==")
