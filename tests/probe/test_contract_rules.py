"""Contract analysis without downloads: guards, undecided sites, the pair YAML, the snapshot section.

The callers here are a few lines written in the shape the real ones use (TE's version
constants, transformers' `inspect.signature` test, a runtime condition); the end-to-end
checks against the released files are in test_contracts.py.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from doctor.errors import InputError, RuleError
from doctor.probe import packages
from doctor.probe.contract_specs import load_file, load_specs
from doctor.probe.contracts import analyse
from doctor.snapshot import parse_snapshot


@pytest.fixture(autouse=True)
def _tmp_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` keeps the validated pairs in the user's cache folder: a temp one here."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

CALLEE = '''
def _fwd(q, k, v, dropout_p, softcap, window_size=(-1, -1), block_table=None):
    pass

def public(q, k, v, window_size=(-1, -1)):
    pass
'''

CALLER = '''
from importlib.metadata import version as get_pkg_version
from packaging.version import Version as PkgVersion
import inspect
from fa.iface import _fwd, public

_fa_version = PkgVersion(get_pkg_version("fa-lib"))
_fa_2_6_plus = _fa_version >= PkgVersion("2.6")
_has_window = "window_size" in list(inspect.signature(public).parameters)


def run(q, k, v, softcap, runtime_flag):
    kwargs = {}
    if _fa_2_6_plus:
        kwargs["softcap"] = softcap
    if runtime_flag:
        kwargs["page"] = 1
    return _fwd(q, k, v, 0.0, **kwargs)


def fixed(q, k, v):
    extra = {"window_size": (1, 1)} if _has_window else {}
    return public(q, k, v, **extra)
'''

PAIRS = '''
pairs:
  - id: app-fa
    title: app calls fa
    caller: {dist: app, files: ["app/*.py"]}
    callee: {dist: fa-lib, modules: [fa]}
    sources: ["https://github.com/o/r/blob/v1.0/app/x.py"]
'''


def _site(tmp_path: Path, fa_version: str) -> Path:
    site = tmp_path / "site"
    for name, version in (("app", "1.0"), ("fa_lib", fa_version)):
        d = site / f"{name}-{version}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Name: {name.replace('_', '-')}\nVersion: {version}\n\n")
    (site / "fa").mkdir()
    (site / "fa" / "__init__.py").write_text("")
    (site / "fa" / "iface.py").write_text(textwrap.dedent(CALLEE))
    (site / "app").mkdir()
    (site / "app" / "__init__.py").write_text("")
    (site / "app" / "run.py").write_text(textwrap.dedent(CALLER))
    return site


def _analyse(tmp_path: Path, fa_version: str) -> Dict[str, Any]:
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "p.yaml").write_text(PAIRS)
    site = _site(tmp_path, fa_version)
    return analyse(packages.scan([str(site)]), load_specs(spec_dir), tmp_path / "cache")


def _by_line(doc: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {s["symbol"].rsplit(".", 1)[1] + ("" if s["kind"] == "call" else ":import"): s for s in doc["sites"]}


def test_a_version_guard_decides_the_keyword_and_a_runtime_flag_is_undecided(tmp_path: Path) -> None:
    old = _by_line(_analyse(tmp_path / "old", "2.5.0"))
    # < 2.6: softcap is never passed, and it is required -> a certain break
    assert old["_fwd"]["verdict"] == "breaks" and "'softcap'" in old["_fwd"]["reason"]
    new = _by_line(_analyse(tmp_path / "new", "2.6.1+local"))
    # >= 2.6 (a local build too): softcap is passed; `page` only when runtime_flag: undecided, not an error
    assert new["_fwd"]["verdict"] == "undecided"
    assert "'page'" in new["_fwd"]["reason"] and "runtime_flag" in new["_fwd"]["reason"]


def test_an_inspect_signature_guard_is_evaluated_against_the_callee(tmp_path: Path) -> None:
    doc = _by_line(_analyse(tmp_path, "2.6.1"))
    assert doc["public"]["verdict"] == "binds"
    assert doc["public:import"]["verdict"] == "binds"


def test_a_pair_whose_callee_is_not_installed_is_skipped(tmp_path: Path) -> None:
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    (spec_dir / "p.yaml").write_text(PAIRS)
    site = _site(tmp_path, "2.6.1")
    for p in site.glob("fa_lib-*"):
        for f in p.iterdir():
            f.unlink()
        p.rmdir()
    assert analyse(packages.scan([str(site)]), load_specs(spec_dir), None)["pairs"] == []


def test_the_shipped_pairs_load_and_cite_release_tags() -> None:
    specs = load_specs()
    ids = {p.id for p in specs.pairs}
    assert {"te-flash-attn", "transformers-flash-attn", "xtuner-transformers"} <= ids
    for p in specs.pairs:
        assert all("/main/" not in s and "/master/" not in s for s in p.sources)


@pytest.mark.parametrize(
    "text, where, what",
    [
        (PAIRS.replace("    title:", "    titel: x\n    title:"), 4, "unknown key 'titel'"),
        (PAIRS.replace("blob/v1.0", "blob/main"), 7, "not upstream code at a release tag"),
        (PAIRS.replace("callee: {dist: fa-lib, modules: [fa]}", "callee: {dist: fa-lib}"), 6, "missing key 'modules'"),
    ],
)
def test_a_bad_pair_file_names_file_and_line(tmp_path: Path, text: str, where: int, what: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RuleError) as err:
        load_file(path)
    assert err.value.line == where and what in err.value.message
    assert err.value.one_line().startswith(f"{path}:{where}: ")


def test_a_snapshot_with_a_bad_contract_verdict_is_refused_with_its_line() -> None:
    doc = {"schema_version": 1, "contracts": {"pairs": [], "sites": [
        {"pair": "x", "kind": "call", "site": "a.py:1", "symbol": "m.f", "reason": "r", "verdict": "maybe"}]}}
    with pytest.raises(InputError) as err:
        parse_snapshot(json.dumps(doc, indent=1), "snap.json")
    assert "verdict must be one of binds, breaks, undecided" in err.value.message and err.value.line == 12


LAZY_PAIRS = '''
pairs:
  - id: app-lz
    title: app imports from a lazy package
    caller: {dist: app, files: ["app/*.py"]}
    callee: {dist: lz-lib, modules: [lz], check_imports: [lz]}
    sources: ["https://github.com/o/r/blob/v1.0/app/x.py"]
'''

# the shape of transformers' top level: a _LazyModule with TYPE_CHECKING imports, model
# packages reached through `from .models import *`, each re-exporting files with __all__
LAZY_FILES = {
    "lz/__init__.py": '''
        from typing import TYPE_CHECKING
        from .utils import _LazyModule
        _import_structure = {"cache": ["Cache"], "table_only": ["TableOnly"]}
        if TYPE_CHECKING:
            from .cache import Cache
            from .models import *
        else:
            import sys
            sys.modules[__name__] = _LazyModule(__name__, _import_structure)
    ''',
    "lz/utils.py": "class _LazyModule:\n    pass\n",
    "lz/cache.py": "class Cache:\n    pass\n",
    "lz/models/__init__.py": '''
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .alpha import *
            from .beta import *
        else:
            _LazyModule = None
    ''',
    "lz/models/alpha/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .modeling_alpha import *\n_LazyModule = None\n",
    "lz/models/alpha/modeling_alpha.py": '"""Use it with Removed or BetaModel."""\nclass AlphaModel:\n    pass\n__all__ = ["AlphaModel"]\n',
    "lz/models/beta/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .modeling_beta import *\n_LazyModule = None\n",
    "lz/models/beta/modeling_beta.py": "class BetaModel:\n    pass\n__all__ = ['BetaModel']\n",
}


def _lazy_site(tmp_path: Path, imports: str, extra: Optional[Dict[str, str]] = None,
               links: Optional[Dict[str, str]] = None, pairs: str = LAZY_PAIRS) -> Dict[str, Any]:
    site = tmp_path / "site"
    for name in ("app", "lz_lib"):
        d = site / f"{name}-1.0.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Name: {name.replace('_', '-')}\nVersion: 1.0\n\n")
    for rel, text in {**LAZY_FILES, **(extra or {}), "app/__init__.py": "", "app/run.py": imports}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text))
    for rel, target in (links or {}).items():
        (site / rel).symlink_to(site / target, target_is_directory=True)
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    (spec_dir / "p.yaml").write_text(pairs)
    doc = analyse(packages.scan([str(site)]), load_specs(spec_dir), tmp_path / "cache")
    return {s["symbol"].rsplit(".", 1)[1]: s for s in doc["sites"]}


def test_a_name_no_file_of_a_lazy_package_spells_is_missing(tmp_path: Path) -> None:
    """What peft 0.17 hit on transformers 5: `from transformers import HybridCache`."""
    sites = _lazy_site(tmp_path, "from lz import Cache, BetaModel, Gone\n")
    assert sites["Gone"]["verdict"] == "breaks" and "lz has no 'Gone'" in sites["Gone"]["reason"]
    assert sites["Cache"]["verdict"] == "binds"
    # found behind two lazy `import *` levels, past a model package that does not export it
    assert sites["BetaModel"]["verdict"] == "binds"


def test_a_name_a_lazy_package_spells_but_does_not_resolve_stays_undecided(tmp_path: Path) -> None:
    # TableOnly is only in the string table the _LazyModule reads; Removed only in a docstring of a
    # file whose __all__ does not export it: both are spelled somewhere, so neither is called missing
    sites = _lazy_site(tmp_path, "from lz import TableOnly, Removed\n")
    assert sites["TableOnly"]["verdict"] == "undecided"
    assert sites["Removed"]["verdict"] == "undecided"


# Review 2026-11-23b: a name no `.py` file spells may still exist; each of these is undecided, never breaks.
_FORWARDER = {"lz/fwd/__init__.py": "import importlib\n\ndef __getattr__(name):\n    return getattr(importlib.import_module('other'), name)\n"}


def test_a_module_getattr_that_forwards_elsewhere_is_not_proof_of_absence(tmp_path: Path) -> None:
    pairs = LAZY_PAIRS.replace("check_imports: [lz]", "check_imports: [lz, lz.fwd]")
    sites = _lazy_site(tmp_path, "from lz.fwd import Anything\n", extra=_FORWARDER, pairs=pairs)
    assert sites["Anything"]["verdict"] == "undecided"


def test_a_name_under_a_symlinked_model_folder_is_found(tmp_path: Path) -> None:
    extra = {
        "lz/models/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .gamma import *\n_LazyModule = None\n",
        "vendored/gamma/__init__.py": "from .modeling_gamma import *\n",
        "vendored/gamma/modeling_gamma.py": "class GammaModel:\n    pass\n__all__ = ['GammaModel']\n",
    }
    sites = _lazy_site(tmp_path, "from lz import GammaModel\n", extra=extra, links={"lz/models/gamma": "vendored/gamma"})
    assert sites["GammaModel"]["verdict"] != "breaks"


def test_a_package_with_a_compiled_module_is_not_proof_of_absence(tmp_path: Path) -> None:
    # lz/_native.*.so may define anything; `from ._native import *` is no file we can read
    extra = {"lz/_native.cpython-311-x86_64-linux-gnu.so": "\x7fELF", "lz/__init__.py": LAZY_FILES["lz/__init__.py"].replace(
        "from .cache import Cache", "from .cache import Cache\n            from ._native import *")}
    sites = _lazy_site(tmp_path, "from lz import NativeThing\n", extra=extra)
    assert sites["NativeThing"]["verdict"] == "undecided"


def test_a_computed_all_does_not_hide_what_import_star_brings(tmp_path: Path) -> None:
    extra = {
        "lz/plain.py": "from ._impl import *\n",
        "lz/_impl.py": "from .cache import Cache\nclass DynModel:\n    pass\n__all__ = [n for n in dir() if n.endswith('Model')]\n",
    }
    pairs = LAZY_PAIRS.replace("check_imports: [lz]", "check_imports: [lz, lz.plain]")
    sites = _lazy_site(tmp_path, "from lz.plain import DynModel\n", extra=extra, pairs=pairs)
    assert sites["DynModel"]["verdict"] != "breaks"


def test_a_star_import_leaving_a_subpackage_from_a_file_under_it_is_followed(tmp_path: Path) -> None:
    # lz.plain2 re-exports the package .inner, whose .sub re-exports ...extra: the name lives outside lz/plain2/
    extra = {
        "lz/plain2/__init__.py": "from .inner import *\n",
        "lz/plain2/inner/__init__.py": "from .sub import *\n",
        "lz/plain2/inner/sub.py": "from ...extra import *\n",
        "lz/extra.py": "class ExtraThing:\n    pass\n",
    }
    pairs = LAZY_PAIRS.replace("check_imports: [lz]", "check_imports: [lz, lz.plain2]")
    sites = _lazy_site(tmp_path, "from lz.plain2 import ExtraThing, NotThere\n", extra=extra, pairs=pairs)
    assert sites["ExtraThing"]["verdict"] == "binds"
    assert sites["NotThere"]["verdict"] == "breaks"  # not lazy: a name no file binds is still missing


@pytest.mark.parametrize("text, names", [
    (b"__all__ = ['A', \"B\"]  # [x]\n__all__ += ('C',)\n", {"A", "B", "C"}),
    (b"__all__ = [\n    'A',  # )\n]\n", {"A"}),
    (b"__all__ = [n for n in dir()]\n", None),
    (b"__all__ = base.__all__ + ['A']\n", None),
    (b"__all__: list = ['A']\n", None),
    (b"if x:\n    __all__ = ['A']\n", None),
    (b"__all__ = ['A']\n__all__.extend(more)\n", None),
    (b"__all__ = ['A'\n", None),
    (b"x = 1\n", None),
])
def test_literal_all_reads_only_a_literal_list(text: bytes, names: Any) -> None:
    from doctor.probe.contracts import literal_all
    assert literal_all(text) == names


def test_a_folder_that_cannot_be_listed_is_not_proof_of_absence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # os.walk skips a folder it cannot list (permissions) unless told; its files were never read
    import doctor.probe.contracts as contracts

    real_walk = contracts.os.walk

    def walk(top: str, onerror: Any = None, followlinks: bool = False) -> Any:
        for root, dirs, names in real_walk(top, followlinks=followlinks):
            if "models" in dirs:
                dirs.remove("models")
                if onerror is not None:
                    onerror(PermissionError(13, "Permission denied", os.path.join(root, "models")))
            yield root, dirs, names

    monkeypatch.setattr(contracts.os, "walk", walk)
    sites = _lazy_site(tmp_path, "from lz import BetaModel, Gone\n")
    assert sites["Gone"]["verdict"] == "undecided" and sites["BetaModel"]["verdict"] != "breaks"


def test_a_subfolder_without_init_is_a_namespace_package_not_a_missing_name(tmp_path: Path) -> None:
    sites = _lazy_site(tmp_path, "from lz import nsdir, Gone\n", extra={"lz/nsdir/tool.py": "X = 1\n"})
    assert sites["nsdir"]["verdict"] != "breaks" and sites["Gone"]["verdict"] == "breaks"
