"""tools/evidence.py on small artifacts built in a temp dir: no network, no real PyPI.

The fake index serves three releases of a package `demo` (two wheels and one sdist); the tool
must download each once into the cache, check the sha256, read the files in both layouts,
evaluate regex / absent / literal / signature / class assertions, and write a lock whose records
the catalogue-side judge reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.tools.conftest import load_tool

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "evidence.py"

pytestmark = pytest.mark.skipif(not TOOL.is_file(), reason="tools/ is not part of an installed package")


def _tool() -> Any:
    return load_tool("evidence")


SOURCES = {
    "1.0": "def attend(q, k, v):\n    return q\n",
    "1.1": "def attend(q, k, v, softcap):\n    return q\n\nclass Layer:\n    def forward(self, x):\n        return x\n",
    "2.0": "def attend(q, k, v, softcap=0.0):\n    raise RuntimeError('demo needs a GPU')\n\nclass Layer:\n    def forward(self, x):\n        return x\n",
}


def _wheel(files: Dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


def _sdist(version: str, files: Dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"demo-{version}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture()
def fake_pypi() -> Dict[str, Any]:
    blobs: Dict[str, bytes] = {}
    releases: Dict[str, List[Dict[str, Any]]] = {}
    for v, src in SOURCES.items():
        if v == "2.0":
            name, data, kind = f"demo-{v}.tar.gz", _sdist(v, {"demo/core.py": src}), "sdist"
        else:
            name, data, kind = f"demo-{v}-py3-none-any.whl", _wheel({"demo/core.py": src}), "bdist_wheel"
        blobs[name] = data
        # a relative URL, as a PyPI mirror may answer
        releases[v] = [{"filename": name, "url": f"../../files/{name}", "packagetype": kind, "digests": {"sha256": hashlib.sha256(data).hexdigest()}}]
    releases["2.1rc1"] = releases["2.0"]  # pre-releases are skipped
    calls: List[str] = []

    def fetch(url: str) -> bytes:
        calls.append(url)
        if url.endswith("/pypi/demo/json"):
            return json.dumps({"releases": releases}).encode()
        return blobs[url.rsplit("/", 1)[-1]]

    return {"fetch": fetch, "calls": calls}


def test_reads_wheels_and_sdists_and_judges_ranges(tmp_path: Path, fake_pypi: Dict[str, Any]) -> None:
    ev = _tool()
    run = ev.Run(tmp_path / "cache", fetch=fake_pypi["fetch"])
    entries = [
        ev.Entry("R-SOFTCAP", 0, {"package": "demo", "range": ">=1.1", "all": [{"file": "demo/*.py", "function": "attend", "param": "softcap"}]}, False, "x.yaml", 1),
        ev.Entry("R-REQUIRED", 0, {"package": "demo", "range": ">=1.1,<2.0", "all": [{"file": "demo/core.py", "function": "attend", "required_param": "softcap"}]}, False, "x.yaml", 2),
        ev.Entry("R-LATE", 0, {"package": "demo", "range": ">=2.0", "all": [{"file": "demo/core.py", "class": "Layer", "method": "forward"}]}, False, "x.yaml", 3),
        ev.Entry("R-TEXT", 0, {"package": "demo", "range": ">=2.0", "within": True, "all": [{"file": "demo/core.py", "literal": "demo needs a GPU"}]}, False, "x.yaml", 4),
        ev.Entry("R-ABSENT", 0, {"package": "demo", "range": "<1.1", "all": [{"file": "demo/core.py", "absent": r"softcap"}, {"file": "demo/core.py", "regex": r"^def attend"}]}, False, "x.yaml", 5),
    ]
    out = ev.evaluate(entries, run, lambda s: None)
    recs = out["records"]
    assert recs["R-SOFTCAP#0"]["holds"] == ["1.1", "2.0"] and recs["R-SOFTCAP#0"]["fails"] == ["1.0"]
    assert recs["R-REQUIRED#0"]["holds"] == ["1.1"]
    assert recs["R-ABSENT#0"]["holds"] == ["1.0"]
    from doctor.rules.evidence import judge

    assert judge(entries[0].spec, recs["R-SOFTCAP#0"]).ok
    assert judge(entries[1].spec, recs["R-REQUIRED#0"]).ok
    late = judge(entries[2].spec, recs["R-LATE#0"])  # Layer.forward exists from 1.1: the range starts too late
    assert not late.ok and late.derived == ">=1.1" and "1.1" in late.problem
    assert judge(entries[3].spec, recs["R-TEXT#0"]).ok
    assert set(out["packages"]["pypi:demo"]) == {"1.0", "1.1", "2.0"}

    # a second run reads the cache: only the index is fetched again
    fake_pypi["calls"].clear()
    ev.evaluate(entries, ev.Run(tmp_path / "cache", fetch=fake_pypi["fetch"]), lambda s: None)
    assert [c for c in fake_pypi["calls"] if not c.endswith("/json")] == []


def test_a_corrupt_download_is_refused(tmp_path: Path, fake_pypi: Dict[str, Any]) -> None:
    ev = _tool()

    def tampered(url: str) -> bytes:
        data = fake_pypi["fetch"](url)
        return data if url.endswith("/json") else data + b"x"

    run = ev.Run(tmp_path / "cache", fetch=tampered)
    entry = ev.Entry("R", 0, {"package": "demo", "range": ">=1.1", "all": [{"file": "demo/*.py", "regex": "softcap"}]}, False, "x.yaml", 1)
    out = ev.evaluate([entry], run, lambda s: None)
    assert out["records"]["R#0"]["holds"] == [] and len(run.failures) == 3
    assert all("sha256" in f for f in run.failures)


def test_lock_round_trip_keeps_other_records(tmp_path: Path) -> None:
    ev = _tool()
    old = {"records": {"A#0": {"x": 1}, "GONE#0": {"x": 2}}, "packages": {"pypi:demo": {"1.0": {"file": "a"}}}}
    new = {"records": {"B#0": {"y": 3}}, "packages": {"pypi:demo": {"1.1": {"file": "b"}}}}
    lock = ev.merge_lock(old, new, keep=lambda k: k != "GONE#0")
    assert set(lock["records"]) == {"A#0", "B#0"}
    assert list(lock["packages"]["pypi:demo"]) == ["1.0", "1.1"]
    assert json.loads(ev.dump_lock(lock)) == lock
