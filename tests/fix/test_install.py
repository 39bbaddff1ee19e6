"""Fixes that install: on every seed and every firing case of a rule with fixes, the main plan
resolves over the catalogue's real Requires-Dist (or is the one allowed kind of conflict), every
command it prints is valid for the packages' real metadata, and `check` with the plan assumed
(the plan's own re-check command) exits 0."""

from __future__ import annotations

import io
import json
import shlex
import zipfile
from pathlib import Path
from typing import Any, List, Mapping, Optional, Tuple

import pytest

from doctor import app as core
from doctor.errors import InputError
from doctor.fix.install import install_commands, recipes, validate_command
from doctor.fix.plan import FixPlan
from doctor.fix.resolve import resolve
from doctor.releases.catalogue import load_release_catalogue
from doctor.releases.metadata import fetch_metadata, parse_metadata
from doctor.rules.cases import case_snapshot
from doctor.rules.loader import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "docs" / "examples" / "seeds"
FIELD = ROOT / "tests" / "field" / "cases"
CAT = load_catalogue(use_cache=False)
REL = load_release_catalogue()


def _specs() -> List[Any]:
    out = []
    for snap in sorted(SEEDS.glob("*.snapshot.json")):
        wl = snap.with_name(snap.name.replace(".snapshot.json", ".workload.yaml"))
        out.append(pytest.param(("seed", snap, wl), id=snap.name.split(".")[0]))
    for rule in CAT.rules:
        if rule.disables or not any(f.checkable for f in rule.fixes):
            continue
        for i, case in enumerate(rule.tests["fires"]):
            out.append(pytest.param(("case", rule.id, case), id=f"{rule.id}-{i}"))
    import yaml

    for path in sorted(FIELD.glob("*/*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("fix") and doc.get("snapshot"):
            out.append(pytest.param(("field", doc["id"], doc), id=f"field-{doc['id']}"))
    return out


def _plan(spec: Tuple[Any, ...], tmp_path: Path) -> Tuple[FixPlan, List[str]]:
    if spec[0] == "seed":
        snap, wl = spec[1], spec[2]
    elif spec[0] == "field":
        case = spec[2]
        snap = tmp_path / "snap.json"
        snap.write_text(json.dumps(case["snapshot"]), encoding="utf-8")
        wl = tmp_path / "workload.json"
        wl.write_text(json.dumps(case.get("workload") or {}), encoding="utf-8")
    else:
        case: Mapping[str, Any] = spec[2]
        snap = tmp_path / "snap.json"
        snap.write_text(json.dumps(case_snapshot(case)), encoding="utf-8")
        wl = tmp_path / "workload.json"
        wl.write_text(json.dumps(case.get("workload") or {}), encoding="utf-8")
    args = ["--env", str(snap), "--workload", str(wl)]
    opts = core.CheckOptions(env_files=(snap,), workload_file=wl, kernels=False)
    return core.run_fix(core.FixOptions(check=opts, verify_args=tuple(shlex.quote(a) for a in args))), args


def _exit_code(argv: List[str], capsys: Any) -> int:
    from doctor.cli import main

    try:
        main(argv)
    except SystemExit as exc:
        capsys.readouterr()
        return int(exc.code or 0)
    capsys.readouterr()
    return 0


@pytest.mark.parametrize("spec", _specs())
def test_main_plan_installs_and_rechecks_clean(spec: Tuple[Any, ...], tmp_path: Path, capsys: Any) -> None:
    plan, _ = _plan(spec, tmp_path)
    if not plan.targets:
        return
    # 1. it resolves; the one conflict allowed is a cuDNN wheel over torch's exact pin that clears
    #    an error, with the override explained and the conflict-free torch move as an alternative
    assert plan.resolution is not None
    if plan.conflicts:
        cudnn = [p for p in plan.pins if p.name.startswith("nvidia-cudnn-cu")]
        assert cudnn, plan.conflicts
        assert any(f.severity == "error" and f.rule_id in plan.cleared for f in plan.targets)
        assert any("constraints file" in c and "Undone by" in c for c in plan.conflicts)
    else:
        assert plan.resolution.ok, plan.resolution.conflicts
    # 2. every install command is valid for the packages' real metadata
    for step in plan.steps:
        if step.kind in ("pip", "wheel", "build"):
            assert validate_command(step.command, REL) == [], step.command
    # 3. the plan's own re-check command exits 0
    verify = [s for s in plan.steps if s.kind == "verify"][0]
    argv = shlex.split(verify.command)[1:] + ["--no-kernels"]
    assert argv[0] == "check"
    if plan.unresolved:
        return  # nothing in the catalogue clears these; the exit code says so
    assert _exit_code(argv, capsys) == 0, verify.command


def _seed_plan(prefix: str, tmp_path: Path) -> FixPlan:
    snap = next(SEEDS.glob(f"{prefix}-*.snapshot.json"))
    wl = snap.with_name(snap.name.replace(".snapshot.json", ".workload.yaml"))
    return _plan(("seed", snap, wl), tmp_path)[0]


def test_seed_003_clears_the_error_without_a_conflicting_pin(tmp_path: Path) -> None:
    plan = _seed_plan("003", tmp_path)
    assert not plan.conflicts
    assert not any(p.name.startswith("nvidia-cudnn-cu") for p in plan.pins)
    assert "TE-NO-BACKEND" in plan.cleared
    # the cuDNN warning is kept, and the ways to clear it are listed with what they cost
    assert plan.kept_warnings == ("TE-REQ-CUDNN-9-3",)
    alts = [a for a in plan.alternatives if "TE-REQ-CUDNN-9-3" in a.rule_ids]
    assert any(p.name == "torch" for a in alts for p in a.pins)
    assert all("install:" in a.why for a in alts if a.pins)


def test_seed_004_installs_the_te_torch_extension(tmp_path: Path) -> None:
    plan = _seed_plan("004", tmp_path)
    te = [s for s in plan.steps if "transformer-engine" in s.command and s.kind != "verify"]
    assert len(te) == 1
    cmd = te[0].command
    assert '"transformer-engine[pytorch]==1.12.0"' in cmd and "--no-build-isolation" in cmd
    assert "transformer_engine_torch" in te[0].cost and "CUDA toolkit" in te[0].cost
    assert plan.resolution is not None and plan.resolution.versions.get("transformer-engine-torch") == "1.12.0"
    assert plan.resolution.versions.get("transformer-engine-cu12") == "1.12.0"
    assert any(p.name == "transformer-engine" and p.extras == ("pytorch",) for p in plan.pins)


def test_seed_001_keeps_the_cudnn_override_and_says_how_it_sticks(tmp_path: Path) -> None:
    plan = _seed_plan("001", tmp_path)
    assert [str(p) for p in plan.pins] == ["nvidia-cudnn-cu12==9.3.0.75"]
    # the conflict-free way is listed: a torch whose own cuDNN pin is new enough
    assert any(any(p.name == "torch" for p in a.pins) and "pip installs it without complaint" in a.why for a in plan.alternatives)
    step = next(s for s in plan.steps if "nvidia-cudnn" in s.command)
    assert "--no-deps" in step.command
    assert plan.resolution is not None and not plan.resolution.ok
    assert any("torch 2.4.1" in str(c) and "9.1.0.70" in str(c) for c in plan.resolution.conflicts)


# --------------------------------------------------------------------------- validation


def test_validate_command_rejects_what_pip_would() -> None:
    assert validate_command('pip install --no-build-isolation "transformer-engine[pytorch]==1.12.0"', REL) == []
    assert "no extra [torch]" in " ".join(validate_command('pip install "transformer-engine[torch]==1.12.0"', REL))
    assert "not a release" in " ".join(validate_command('pip install "transformer-engine==1.12.7"', REL))
    assert "unknown flag" in " ".join(validate_command('pip install --yolo "transformers==4.42.4"', REL))
    good = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    assert validate_command(f"pip install --no-deps {good}", REL) == []
    assert validate_command(f"pip install --no-deps {good.replace('torch2.6', 'torch2.9')}", REL)
    assert validate_command(f"pip install --no-deps {good.replace('cu12torch', 'cu124torch')}", REL)
    assert validate_command('pip install "transformers==4.42.4" --index-url https://download.pytorch.org/whl/cu121', REL)


def test_te_core_is_an_extra_from_2_9_and_named_for_torchs_cuda() -> None:
    cmds = install_commands(REL, {"transformer-engine": "2.17.0"}, {"torch": "2.6.0+cu124", "transformer-engine": "2.3.0"}, "2.6.0+cu124", cuda_major=12)
    assert '"transformer-engine[pytorch,core-cu12]==2.17.0"' in cmds[0].command
    res = resolve(REL, {"torch": "2.6.0+cu124"}, [("transformer-engine", "2.17.0", ("pytorch", "core-cu12"))], "3.10", 12)
    assert res.ok and res.versions["transformer-engine-cu12"] == "2.17.0" and "transformer-engine-cu13" not in res.versions


def test_torch_move_from_a_cuda_index_keeps_the_index() -> None:
    cmds = install_commands(REL, {"torch": "2.7.1"}, {"torch": "2.4.1+cu121", "transformer-engine": "1.13.0"}, "2.4.1+cu121", cuda_major=12)
    assert cmds[0].command == 'pip install "torch==2.7.1" --index-url https://download.pytorch.org/whl/cu126'
    assert validate_command(cmds[0].command, REL) == []
    # TE stays: its torch extension is rebuilt against the new torch, after it
    assert cmds[1].command == 'pip install --no-build-isolation --no-deps --force-reinstall "transformer-engine-torch==1.13.0"'


# --------------------------------------------------------------------------- resolution


def test_resolver_reports_torchs_exact_pins_and_framework_pins() -> None:
    both = resolve(REL, {"torch": "2.6.0+cu124"}, [("torch", "2.7.1", ()), ("nvidia-cudnn-cu12", "9.3.0.75", ())], "3.10")
    assert not both.ok and any("9.5.1.17" in str(c) for c in both.conflicts)
    xt = resolve(REL, {"torch": "2.3.1+cu121", "xtuner": "0.2.0", "transformers": "4.48.0"}, [("transformers", "4.42.4", ())], "3.10")
    assert not xt.ok and any(str(c).startswith("xtuner 0.2.0 requires transformers") for c in xt.conflicts)
    assert any(c.who == "xtuner" and c.name == "transformers" and c.found == "4.42.4" for c in xt.conflicts)
    te = resolve(REL, {"torch": "2.4.1"}, [("transformer-engine", "1.12.0", ("pytorch",))], "3.10", 12)
    assert te.ok and te.versions["transformer-engine-torch"] == te.versions["transformer-engine-cu12"] == "1.12.0"


def test_te_1_11_torch_extension_caps_flash_attn() -> None:
    # transformer_engine_torch 1.11.0 requires flash-attn<=2.6.3 (its real Requires-Dist)
    res = resolve(REL, {"torch": "2.4.1", "flash-attn": "2.7.4.post1"}, [("transformer-engine", "1.11.0", ("pytorch",))], "3.10", 12)
    assert not res.ok or res.versions.get("flash-attn") != "2.7.4.post1"


def test_an_installed_packages_own_requirements_hold_a_pin() -> None:
    # a trainer the catalogue does not list (installed from a fork) caps transformers in its
    # installed METADATA: the probe's `requires` is what pip checks after the install
    installed = {"torch": "2.4.1", "transformers": "4.44.2", "my-trainer": "0.3.0.dev0"}
    requires = {"my-trainer": ("transformers<4.46,>=4.41",)}
    res = resolve(REL, installed, [("transformers", "4.48.0", ())], "3.10", installed_requires=requires)
    assert not res.ok
    assert [str(c) for c in res.conflicts] == ["my-trainer 0.3.0.dev0 requires transformers<4.46,>=4.41, but transformers 4.48.0 would be installed"]
    # an older snapshot without `requires`: nothing is known about the unlisted trainer
    assert resolve(REL, installed, [("transformers", "4.48.0", ())], "3.10").ok


def test_a_pin_that_needs_a_newer_unlisted_package_names_the_floor() -> None:
    # trl 0.16.0 requires datasets>=3.0.0 (its wheel's Requires-Dist); LLaMA-Factory 0.9.0 caps
    # datasets at 2.21.0 and trl at 0.9.6. datasets has no release list in the catalogue: the
    # lowest the floor allows stands for what pip would install
    installed = {"torch": "2.4.1", "llamafactory": "0.9.0", "trl": "0.9.6", "datasets": "2.21.0", "transformers": "4.45.0", "accelerate": "0.33.0"}
    requires = {"llamafactory": ("datasets<=2.21.0,>=2.16.0", "trl<=0.9.6,>=0.8.6", "transformers<=4.45.0,>=4.41.2", "accelerate<=0.33.0,>=0.30.1")}
    res = resolve(REL, installed, [("trl", "0.16.0", ())], "3.10", installed_requires=requires)
    text = [str(c) for c in res.conflicts]
    assert "llamafactory 0.9.0 requires datasets<=2.21.0,>=2.16.0, but datasets 3.0.0 or newer (pip takes the newest) would be installed" in text
    assert "llamafactory 0.9.0 requires trl<=0.9.6,>=0.8.6, but trl 0.16.0 would be installed" in text
    # as pip does, the unmet floors move transformers and accelerate to their newest release
    assert {c.name for c in res.conflicts} == {"datasets", "trl", "transformers", "accelerate"}
    # trl 0.12.0 asks for datasets>=2.21.0, which the installed one meets: datasets stays
    res = resolve(REL, installed, [("trl", "0.12.0", ())], "3.10", installed_requires=requires)
    assert res.versions["datasets"] == "2.21.0" and "datasets" not in {c.name for c in res.conflicts}
    # LLaMA-Factory 0.9.1 caps datasets at 3.1.0: the floor (3.0.0) fits under it, but pip takes
    # the newest datasets, which does not (check-Q1)
    lf091 = {**installed, "llamafactory": "0.9.1"}
    req091 = {"llamafactory": ("datasets<=3.1.0,>=2.16.0",)}
    res = resolve(REL, lf091, [("trl", "0.16.0", ())], "3.10", installed_requires=req091)
    assert [str(c) for c in res.conflicts] == ["llamafactory 0.9.1 requires datasets<=3.1.0,>=2.16.0, but datasets 3.0.0 or newer (pip takes the newest) would be installed"]
    # a package list without datasets at all (a hand-written snapshot, a rule case): LLaMA-Factory's
    # requirement on it was unmet before the plan, so its cap is not the plan's conflict
    partial = {k: v for k, v in installed.items() if k != "datasets"}
    res = resolve(REL, partial, [("trl", "0.16.0", ())], "3.10", installed_requires=requires)
    assert "datasets" not in {c.name for c in res.conflicts} and "trl" in {c.name for c in res.conflicts}


# --------------------------------------------------------------------------- data


def test_recipe_extras_exist_in_the_catalogue() -> None:
    for name, rec in recipes().items():
        for extra in rec.extras:
            pkg = REL.packages[name]
            with_meta = [r for r in pkg.releases if r.requires_dist is not None]
            assert with_meta and all(extra in r.provides_extra for r in with_meta), (name, extra)


def test_malformed_recipes_are_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "install.json"
    bad.write_text('{"packages": {"torch": {"order": -1}}}', encoding="utf-8")
    with pytest.raises(InputError) as exc:
        recipes(str(bad))
    assert "install.json" in exc.value.one_line() and "packages/torch/order" in exc.value.one_line()
    bad.write_text('{"packages": {"flash-attn": {"order": 1, "flags": ["--yolo"]}}}', encoding="utf-8")
    with pytest.raises(InputError):
        recipes(str(bad))


def test_metadata_reads_wheel_metadata_by_range_requests() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", "x = 1\n" * 1000)
        z.writestr(
            "pkg-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\nRequires-Dist: torch>=2.1\nRequires-Dist: numpy\n"
            'Requires-Dist: flash-attn==2.8.3; extra == "fa"\nProvides-Extra: fa\n',
        )
    body = buf.getvalue()
    asked: List[Optional[Tuple[int, int]]] = []

    def http(url: str, rng: Optional[Tuple[int, int]]) -> bytes:
        if url.endswith("/simple/pkg/"):
            return json.dumps({"files": [{"filename": "pkg-1.0-py3-none-any.whl", "url": "https://x/pkg-1.0-py3-none-any.whl", "size": len(body)}]}).encode()
        asked.append(rng)
        assert rng is not None, "the wheel is never downloaded whole"
        return body[rng[0] : rng[1] + 1]

    meta = fetch_metadata("pkg", ["1.0"], http=http, workers=1)["1.0"]
    assert meta["requires_dist"] == ["torch>=2.1", 'flash-attn==2.8.3; extra == "fa"']  # numpy is not tracked
    assert meta["provides_extra"] == ["fa"] and meta["file"]["kind"] == "wheel"
    assert parse_metadata("Name: x\nRequires-Dist: transformer_engine_cu12==2.1.0\n")["requires_dist"] == ["transformer_engine_cu12==2.1.0"]


def test_online_asks_pip_for_wheels_only_and_never_builds() -> None:
    from doctor.fix.online import pip_dry_run
    from doctor.model import Pin

    seen: List[List[str]] = []

    def run(argv: Any) -> Tuple[int, str, str]:
        seen.append(list(argv))
        return 0, json.dumps({"install": [{}, {}]}), ""

    v = pip_dry_run([Pin("transformers", "4.42.4"), Pin("flash-attn", "2.7.4.post1")], ["flash-attn"], "3.10", run)
    assert v.ok and v.skipped == ("flash-attn==2.7.4.post1",)
    argv = seen[0]
    assert "--dry-run" in argv and "--only-binary=:all:" in argv and argv[-1] == "transformers==4.42.4"
    assert argv[argv.index("--python-version") + 1] == "3.10"
    bad = pip_dry_run([Pin("transformers", "4.42.4")], [], "3.10", lambda a: (1, "", "ERROR: ResolutionImpossible: x"))
    assert bad.ok is False and "ResolutionImpossible" in bad.message
