"""The wheel: torch, flash-attn, TransformerEngine and cuDNN are never dependencies, the rule
catalogue and the kernel worker ship inside the package, and no top-level `kernels` or `rules`
module is installed (a widely used package named `kernels` exists)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DIAGNOSED = ("torch", "flash-attn", "flash_attn", "transformer-engine", "transformer_engine", "nvidia-cudnn", "xformers", "triton")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(out.glob("attn_doctor-*.whl"))


def test_requires_dist_leaves_the_diagnosed_stack_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    names = {re.split(r"[<>=!~ ;\[]", r, 1)[0].lower() for r in runtime}
    assert names == {"typer", "rich", "packaging", "pyyaml", "nvidia-ml-py", "jsonschema", "tomli"}
    assert any(r.startswith("tomli") and "python_version < \"3.11\"" in r.replace("'", '"') for r in runtime), "tomli only where tomllib is missing"
    for r in requires:  # not even in extras
        assert not any(r.lower().startswith(d) for d in DIAGNOSED), r


def test_data_ships_inside_the_package_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("doctor/_data/rules/backends/") and n.endswith(".yaml") for n in names)
    assert "doctor/_data/rules/releases/torch.json" in names
    assert "doctor/_data/kernels/worker.py" in names
    top = {n.split("/", 1)[0] for n in names}
    assert "kernels" not in top and "rules" not in top
