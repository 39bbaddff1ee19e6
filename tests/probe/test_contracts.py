"""Contract analysis on the real upstream files of the seeds' callers and callees.

TransformerEngine 1.11's context-parallel code calls flash-attn's private varlen functions
(seed 000); XTuner 0.1.23 patches a forward that calls `self._flash_attention_forward` onto
transformers' Qwen2 attention classes (seed 002). The releases are installed into a temp
site-packages (tests/probe/upstream.py) and checked without importing any of them; the
version-table rule for seed 000 is left out of the catalogue, so what fires comes from the
code alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

from doctor.app import Inputs, check
from doctor.assume import apply_pins
from doctor.model import ContextParallel, Pin, Workload
from doctor.probe.collect import collect
from doctor.probe.sources import Sources
from doctor.report.probe_text import render_probe
from doctor.resources import rules_dir
from doctor.rules.loader import load_catalogue
from doctor.snapshot import dump, facts_from_snapshot, parse_snapshot
import upstream

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


_TRANSFORMERS: Dict[str, Path] = {}


@pytest.fixture(autouse=True)
def _tmp_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` keeps the validated pairs in the user's cache folder: a temp one here."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def transformers_tree(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """transformers <version> extracted once per module into its own site folder (read-only use)."""

    def get(version: str) -> Path:
        if version not in _TRANSFORMERS:
            d = tmp_path_factory.mktemp(f"transformers-{version}")
            upstream.install_transformers(d, version)
            _TRANSFORMERS[version] = d
        return _TRANSFORMERS[version]

    yield get
    _TRANSFORMERS.clear()


def _probe(site: Path, cache: Path, *more: Path) -> Dict[str, Any]:
    src = Sources(site_paths=[str(site), *map(str, more)], environ={}, cache_dir=cache, use_ldconfig=False,
                  nvml_loader=_no_nvml, which=lambda name: None, system_lib_dirs=(), system_include_dirs=())
    return collect(loaded=False, sources=src)


def _no_nvml() -> Any:
    raise OSError("no NVML in this test")


def _catalogue() -> Any:
    """The shipped catalogue without seeds.yaml, home of the version-table rule for seed 000."""
    files = [p for p in sorted(rules_dir().rglob("*.yaml"))
             if not {"contracts", "cluster", "startup"} & set(p.parts) and p.name != "seeds.yaml"]
    cat = load_catalogue(files, builtin=False, use_cache=False)
    assert not any(r.id == "TE-CP-FLASH-ATTN-SOFTCAP" for r in cat.rules)
    return cat


def _check_without_seed_rule(doc: Dict[str, Any]) -> Any:
    cat = _catalogue()
    facts = facts_from_snapshot(doc)
    return check(Inputs(facts=facts, workload=Workload(context_parallel=ContextParallel(size=2)), catalogue=cat))


def _sites(doc: Dict[str, Any], pair: str, verdict: str) -> List[Dict[str, Any]]:
    return [s for s in doc["contracts"]["sites"] if s["pair"] == pair and s["verdict"] == verdict]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One parse cache for the module (identical files are parsed once); the cache tests use their own."""
    return tmp_path_factory.mktemp("parse-cache")


def test_te_1_11_with_flash_attn_2_6_3_is_an_error_from_the_code(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    upstream.install_te(site)
    upstream.install_sdist_package(site, "flash_attn-2.6.3.tar.gz", "flash_attn")
    doc = _probe(site, cache)
    broken = _sites(doc, "te-flash-attn", "breaks")
    assert broken and {s["symbol"] for s in broken} == {"flash_attn.flash_attn_interface._flash_attn_varlen_backward"}
    assert all("softcap" in s["reason"] for s in broken)
    assert all(s["site"].startswith("transformer_engine/pytorch/attention.py:") for s in broken)
    text = render_probe(doc, color=False, width=240)
    assert "transformer-engine 1.11.0 -> flash-attn 2.6.3: 18 site(s), 6 break, 1 break on some paths" in text
    assert "_flash_attn_varlen_backward: missing required argument 'softcap' (at transformer_engine/pytorch/attention.py:2433" in text
    # the snapshot carries the facts: a CPU CI run of `check --env` sees the same error
    again = parse_snapshot(dump(doc), "snap.json")
    report = _check_without_seed_rule(again)
    (f,) = [f for f in report.findings if f.rule_id == "CONTRACT-TE-FLASH-ATTN"]
    assert f.severity == "error" and f.status == "fired"
    assert "_flash_attn_varlen_backward" in f.message and "'softcap'" in f.message
    assert "transformer-engine 1.11.0" in f.message and "flash-attn 2.6.3" in f.message
    assert "softcap, alibi_slopes, deterministic" in f.message  # the installed signature
    # fixes: the nearest flash-attn whose contract with TE 1.11 binds, or a TE that binds with 2.6.3
    assert [tuple(map(str, x.pins)) for x in f.fixes] == [("flash-attn==2.5.6",), ("transformer-engine==2.1.0",)]
    # --assume flash-attn==2.5.8: the analysis read 2.6.3's files, so it cannot say; not a pass either
    assumed = apply_pins(facts_from_snapshot(again), [Pin("flash-attn", "2.5.8")])
    (g,) = [g for g in check(Inputs(facts=assumed, workload=Workload(), catalogue=_catalogue())).findings
            if g.rule_id == "CONTRACT-TE-FLASH-ATTN"]
    assert g.status == "not_evaluated" and "flash-attn 2.5.8 assumed" in g.message


def test_te_1_11_with_flash_attn_2_5_8_has_no_contract_error_because_block_table_is_version_guarded(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    upstream.install_te(site)
    upstream.install_sdist_package(site, "flash_attn-2.5.8.tar.gz", "flash_attn")
    doc = _probe(site, cache)
    (pair,) = doc["contracts"]["pairs"]
    assert pair["callee_version"] == "2.5.8" and pair["breaks"] == 0
    forward = [s for s in doc["contracts"]["sites"] if s["symbol"].endswith("_flash_attn_varlen_forward") and s["kind"] == "call"]
    assert forward and all(s["verdict"] == "binds" for s in forward)
    # block_table is a required parameter there, which TE passes only behind its 2.5.7+ guard
    source = (site / "flash_attn" / "flash_attn_interface.py").read_text()
    assert re.search(r"def _flash_attn_varlen_forward\([^)]*\bblock_table,?\s*\)", source)
    # ...but the same 2.5.7+ keywords reach flash_attn_func, which has no block_table, when
    # FlashAttention runs bshd/sbhd without padding (TransformerEngine issue 1236): a warning
    (cond,) = [s for s in doc["contracts"]["sites"] if s.get("conditional")]
    assert cond["symbol"] == "flash_attn.flash_attn_interface.flash_attn_func" and "'block_table'" in cond["reason"]
    assert "'padding' not in attn_mask_type" in cond["reason"]
    report = _check_without_seed_rule(doc)
    (f,) = [f for f in report.findings if f.rule_id.startswith("CONTRACT-")]
    assert f.severity == "warning" and "flash_attn_func" in f.title and "block_table" in f.message


def test_te_1_11_with_flash_attn_2_5_6_and_te_2_1_with_2_6_3_bind_everywhere(tmp_path: Path, cache: Path) -> None:
    """The two known-good pairs the fixes offer, checked by the same analysis: TE 2.1 picks the
    flash-attn function into a local variable and builds *args per branch, both followed."""
    for te, fa in (("1.11.0", "2.5.6"), ("2.1.0", "2.6.3")):
        site = tmp_path / f"site-{te}"
        upstream.install_te(site, te)
        upstream.install_sdist_package(site, f"flash_attn-{fa}.tar.gz", "flash_attn")
        doc = _probe(site, cache)
        (pair,) = doc["contracts"]["pairs"]
        assert (pair["caller_version"], pair["callee_version"]) == (te, fa)
        assert pair["breaks"] == 0 and pair["undecided"] == 0 and pair["sites"] >= 18, pair
        assert not [f for f in _check_without_seed_rule(doc).findings if f.rule_id.startswith("CONTRACT-")]


def test_a_local_flash_attn_build_whose_private_function_gained_a_parameter_is_caught(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    upstream.install_te(site)
    pkg = upstream.install_sdist_package(site, "flash_attn-2.5.8.tar.gz", "flash_attn", version="2.5.8+local")
    iface = pkg / "flash_attn_interface.py"
    text = iface.read_text()
    patched, n = re.subn(r"(def _flash_attn_varlen_backward\(\s*dout,)", r"\1\n    seq_offsets,", text)
    assert n == 1
    iface.write_text(patched)
    doc = _probe(site, cache)
    broken = _sites(doc, "te-flash-attn", "breaks")
    assert broken and all(s["symbol"].endswith("_flash_attn_varlen_backward") for s in broken)
    # one more required positional: TE's 16 positionals now fill up to `causal`, and
    # `window_size`, which TE passes by keyword, collides or is missing
    report = _check_without_seed_rule(doc)
    (f,) = [f for f in report.findings if f.rule_id == "CONTRACT-TE-FLASH-ATTN"]
    assert "2.5.8+local" in f.message and "seq_offsets" in f.message
    # the 2.5.7+ guard still holds for the local build: the forward calls bind
    assert not [s for s in _sites(doc, "te-flash-attn", "breaks") if "forward" in s["symbol"]]


def test_xtuner_0_1_23_with_transformers_4_44_is_caught(tmp_path: Path, cache: Path, transformers_tree: Any) -> None:
    site = tmp_path / "site"
    upstream.install_xtuner(site)
    tf = transformers_tree("4.44.0")
    doc = _probe(site, cache, tf)
    broken = _sites(doc, "xtuner-transformers", "breaks")
    qwen = [s for s in broken if ".Qwen2FlashAttention2." in s["symbol"]]
    assert qwen and qwen[0]["symbol"].endswith("._flash_attention_forward")
    assert qwen[0]["site"].startswith("xtuner/model/modules/dispatch/qwen2.py:")
    assert any(".Qwen2MoeFlashAttention2." in s["symbol"] for s in broken)
    report = _check_without_seed_rule(doc)
    (f,) = [f for f in report.findings if f.rule_id == "CONTRACT-XTUNER-TRANSFORMERS"]
    assert "Qwen2FlashAttention2" in f.message and "_flash_attention_forward" in f.message
    assert f.fixes and tuple(map(str, f.fixes[0].pins)) == ("transformers==4.42.4",)


def test_xtuner_0_1_23_with_transformers_4_42_4_is_clean(tmp_path: Path, cache: Path, transformers_tree: Any) -> None:
    site = tmp_path / "site"
    upstream.install_xtuner(site)
    tf = transformers_tree("4.42.4")
    doc = _probe(site, cache, tf)
    (pair,) = doc["contracts"]["pairs"]
    assert pair["breaks"] == 0 and pair["sites"] > 50
    patched = [s for s in doc["contracts"]["sites"] if s["kind"] == "patch" and s["symbol"].endswith("._flash_attention_forward")]
    assert patched and all(s["verdict"] == "binds" for s in patched)
    assert all(s["reason"] == "binds" for s in patched)


@pytest.mark.parametrize("version, breaks", [("5.0.0rc3", True), ("5.0.0rc2", False)])
def test_peft_0_17_1_with_transformers_5_without_hybridcache_is_caught(tmp_path: Path, cache: Path, version: str, breaks: bool) -> None:
    """GLM-Image#3: a transformers 5.0 build whose lazy top level no longer exports HybridCache."""
    site = tmp_path / "site"
    upstream.install_peft(site)
    upstream.install_transformers_whole(site, version)
    doc = _probe(site, cache)
    rows = [s for s in doc["contracts"]["sites"] if s["pair"] == "peft-transformers" and s["symbol"] == "transformers.HybridCache"]
    assert rows and {s["verdict"] for s in rows} == ({"breaks"} if breaks else {"binds"})
    # every other top-level import resolves through the lazy module's imports (none is left undecided)
    assert not _sites(doc, "peft-transformers", "undecided")
    report = _check_without_seed_rule(doc)
    found = [f for f in report.findings if f.rule_id == "CONTRACT-PEFT-TRANSFORMERS"]
    if not breaks:
        assert not found
        return
    (f,) = found
    assert "HybridCache" in f.title and "ImportError" in f.message and "peft/peft_model.py:37" in f.message
    assert [tuple(map(str, x.pins)) for x in f.fixes] == [("transformers==4.57.1",), ("peft==0.18.1", "transformers==5.0.0")]


def test_the_parse_is_cached_per_file_content(tmp_path: Path, cache: Path) -> None:
    cache = tmp_path / "own-cache"
    site = tmp_path / "site"
    upstream.install_te(site)
    upstream.install_sdist_package(site, "flash_attn-2.6.3.tar.gz", "flash_attn")
    first = _probe(site, cache)
    second = _probe(site, cache)
    assert "(2 file(s) parsed" in first["provenance"]["contracts"]
    assert "(0 file(s) parsed" in second["provenance"]["contracts"]
    assert first["contracts"] == second["contracts"]
    assert any(cache.joinpath("contracts").iterdir())


def test_llamafactory_0_8_3_imports_attention_classes_transformers_4_48_removed(tmp_path: Path, cache: Path, transformers_tree: Any) -> None:
    site = tmp_path / "site"
    upstream.install_llamafactory(site)
    tf = transformers_tree("4.48.0")
    doc = _probe(site, cache, tf)
    broken = _sites(doc, "llamafactory-transformers", "breaks")
    assert {s["symbol"].rsplit(".", 1)[1] for s in broken} == {"LlamaFlashAttention2", "LlamaSdpaAttention"}
    assert all(s["kind"] == "import" and s["site"].startswith("llamafactory/model/model_utils/longlora.py:") for s in broken)
    report = _check_without_seed_rule(doc)
    (f,) = [f for f in report.findings if f.rule_id == "CONTRACT-LLAMAFACTORY-TRANSFORMERS"]
    assert f.fixes and tuple(map(str, f.fixes[0].pins)) == ("transformers==4.44.0",)


def test_llamafactory_0_8_3_with_transformers_4_44_is_clean(tmp_path: Path, cache: Path, transformers_tree: Any) -> None:
    site = tmp_path / "site"
    upstream.install_llamafactory(site)
    tf = transformers_tree("4.44.0")
    doc = _probe(site, cache, tf)
    (pair,) = doc["contracts"]["pairs"]
    assert pair["id"] == "llamafactory-transformers" and pair["breaks"] == 0 and pair["sites"] > 5


def test_editing_an_installed_callee_file_invalidates_the_cached_result(tmp_path: Path, cache: Path) -> None:
    cache = tmp_path / "own-cache"
    site = tmp_path / "site"
    upstream.install_te(site)
    pkg = upstream.install_sdist_package(site, "flash_attn-2.5.8.tar.gz", "flash_attn")
    assert not _sites(_probe(site, cache), "te-flash-attn", "breaks")
    assert "(0 file(s) parsed" in _probe(site, cache)["provenance"]["contracts"]  # all from the cache
    iface = pkg / "flash_attn_interface.py"
    iface.write_text(re.sub(r"(def _flash_attn_varlen_forward\(\s*q,)", r"\1\n    page_size,", iface.read_text()))
    doc = _probe(site, cache)
    assert "(1 file(s) parsed" in doc["provenance"]["contracts"]  # only the edited file
    assert {s["symbol"] for s in _sites(doc, "te-flash-attn", "breaks")} == {
        "flash_attn.flash_attn_interface._flash_attn_varlen_forward"}


def test_unsloth_imports_of_removed_classes_inside_try_except_are_not_errors(tmp_path: Path, cache: Path, transformers_tree: Any) -> None:
    """Unsloth 2024.8 imports LlamaFlashAttention2 & co. in try/except (falling back to
    LlamaAttention); transformers 4.48 removed them: absent, but handled, so no error."""
    site = tmp_path / "site"
    upstream.install_unsloth(site)
    tf = transformers_tree("4.48.0")
    doc = _probe(site, cache, tf)
    (pair,) = doc["contracts"]["pairs"]
    assert pair["id"] == "unsloth-transformers" and pair["breaks"] == 0
    handled = [s for s in doc["contracts"]["sites"] if s["symbol"].endswith(".LlamaFlashAttention2")]
    assert handled and handled[0]["verdict"] == "binds" and "try/except ImportError" in handled[0]["reason"]
    assert not [f for f in _check_without_seed_rule(doc).findings if f.rule_id.startswith("CONTRACT-")]


@pytest.mark.parametrize("fa", ["2.6.3", "2.5.8"])
def test_transformers_4_44_calls_into_flash_attn(tmp_path: Path, cache: Path, fa: str, transformers_tree: Any) -> None:
    """transformers 4.44 passes `deterministic` behind is_flash_attn_greater_or_equal("2.4.1")
    (a helper the pair declares) and `softcap` whenever the model has one: with flash-attn
    2.5.8, which has no softcap, that is undecided (a runtime value), never an error."""
    site = tmp_path / "site"
    tf = transformers_tree("4.44.0")
    upstream.install_sdist_package(site, f"flash_attn-{fa}.tar.gz", "flash_attn")
    doc = _probe(site, cache, tf)
    calls = [s for s in doc["contracts"]["sites"] if s["pair"] == "transformers-flash-attn"
             and s["symbol"].endswith(("flash_attn_func", "flash_attn_varlen_func")) and s["kind"] == "call"]
    assert len(calls) == 3 and all(s["site"].startswith("transformers/modeling_flash_attention_utils.py:") for s in calls)
    assert not _sites(doc, "transformers-flash-attn", "breaks")
    if fa == "2.6.3":
        assert all(s["verdict"] == "binds" for s in calls)
    else:
        assert all(s["verdict"] == "undecided" and "'softcap'" in s["reason"] and "softcap is not None" in s["reason"]
                   for s in calls)


def test_verl_0_6_lazy_model_imports_are_warnings_and_its_version_range_guards_are_evaluated(
    tmp_path: Path, cache: Path, transformers_tree: Any
) -> None:
    """verl 0.6.0 with transformers 4.56.1: the Qwen2.5-VL imports behind
    is_transformers_version_in_range(min_version="4.52.0") bind; the Qwen3-VL ones (a model
    4.56.1 does not have) sit in a model-type branch or a lazily imported file: a warning."""
    site = tmp_path / "site"
    upstream.install_verl(site)
    tf = transformers_tree("4.56.1")
    doc = _probe(site, cache, tf)
    (pair,) = doc["contracts"]["pairs"]
    assert pair["id"] == "verl-transformers" and pair["breaks"] == 0 and pair["conditional"] >= 6
    rows = doc["contracts"]["sites"]
    assert any(r["symbol"].endswith("modeling_qwen2_5_vl.Qwen2_5_VLModel") and r["verdict"] == "binds" for r in rows)
    qwen3 = [r for r in rows if ".qwen3_vl." in r["symbol"]]
    assert qwen3 and all(r.get("conditional") for r in qwen3)
    (f,) = [f for f in _check_without_seed_rule(doc).findings if f.rule_id == "CONTRACT-VERL-TRANSFORMERS"]
    assert f.severity == "warning" and "qwen3_vl" in f.message
