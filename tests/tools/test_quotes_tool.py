"""tools/quotes.py: a quoted error text is looked up in the releases a rule names; a quote that one
release in range does not contain is reported with the releases that do, and a text Python
writes itself is not looked up at all. Offline: the releases are in-memory stand-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from tests.tools.conftest import load_tool

from doctor.rules.loader import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "quotes.py"

pytestmark = pytest.mark.skipif(not TOOL.is_file(), reason="tools/ is not part of an installed package")


def _tool() -> Any:
    return load_tool("quotes")


class FakeFiles:
    def __init__(self, files: Dict[str, str]) -> None:
        self.files = files

    def glob(self, pattern: str) -> List[str]:
        return sorted(self.files)

    def text(self, name: str) -> str:
        return self.files[name]


class FakeReader:
    """Two releases of `ulysses`: 1.0 raises with the old text, 2.0 with a new one."""

    def __init__(self, tool: Any) -> None:
        old = 'assert n % size == 0, (f"Number of heads ({n}) must be "\n    f"divisible by the sequence parallel size ({size})!")\n'
        new = 'raise ValueError(f"Attention head count {n} is not divisible by SP size {size}")\n'
        self.sources = {"1.0": tool.source_text(FakeFiles({"ulysses/layer.py": old})), "2.0": tool.source_text(FakeFiles({"ulysses/layer.py": new, "README.md": old}))}
        self.failures: List[str] = []
        self.read_once: List[Any] = []

    def versions(self, package: str) -> List[str]:
        return ["1.0", "2.0"] if package == "ulysses" else []

    def forget(self, package: str, version: str) -> None:
        self.read_once.append((package, version))

    def text(self, package: str, version: str) -> Optional[str]:
        return self.sources.get(version)


RULE = """\
rules:
  - id: HEADS-NOT-DIVISIBLE
    severity: error
    title: t
    message: >-
      The first forward stops with "AssertionError: Number of heads (N) must be divisible by the sequence parallel
      size ({workload.cp_size})!"; a missing argument gives "TypeError: f() got an unexpected keyword argument 'x'".
    when: {package: ulysses, version: ">=1.0,<3"}
    sources: [https://github.com/deepspeedai/DeepSpeed/issues/1]
    tests:
      fires: [{packages: {ulysses: "1.0"}}]
      passes: [{packages: {ulysses: "3.0"}}]
"""


def test_a_quote_one_release_in_range_lacks_is_reported(tmp_path: Path) -> None:
    tool = _tool()
    p = tmp_path / "r.yaml"
    p.write_text(RULE)
    rule = load_catalogue([p], builtin=False, use_cache=False).rule("HEADS-NOT-DIVISIBLE")
    leads = tool.check_rule(rule, FakeReader(tool), {})
    # the assertion text, split over two source lines in 1.0, is found there; 2.0's code raises another
    # text (only its README still has the old one, and README is not source)
    assert [(x["kind"], x["found"], x["missing"]) for x in leads] == [("varies", ["1.0"], ["2.0"])]
    assert "Number of heads" in leads[0]["quote"]
    # the whole-catalogue scan reads each release once and comes to the same leads
    reader = FakeReader(tool)
    got, failures = tool.scan([], tmp_path, load_catalogue([p], builtin=False, use_cache=False), reader)
    assert got == leads and failures == [] and sorted(reader.read_once) == [("ulysses", "1.0"), ("ulysses", "2.0")]


def test_quote_parts_leave_out_what_a_message_fills_in() -> None:
    tool = _tool()
    assert tool.parts("AssertionError: Number of heads (N) must be divisible by the sequence parallel size (8)!") == [
        "Number of heads",
        "must be divisible by the sequence parallel size",
    ]
    assert tool.parts("Can't load the configuration of 'PeftModelForCausalLM(...'") == ["Can't load the configuration of"]
    # Python's own wording is in no package's source
    assert tool.parts("TypeError: forward() got an unexpected keyword argument 'seq_len'") == []
    assert tool.quotes('mask type contains "padding" before it picks a backend, so it stops with "KV caching requires padding mask!"') == [
        "KV caching requires padding mask!"
    ]


def test_a_release_with_no_source_file_is_unread_not_a_lead(tmp_path: Path) -> None:
    # TransformerEngine 1.9.0 on PyPI is a meta wheel: dependencies, no code. A quote cannot be
    # "missing" from it, so the rule's other release decides and no lead is written.
    tool = _tool()
    p = tmp_path / "r.yaml"
    p.write_text(RULE)
    rule = load_catalogue([p], builtin=False, use_cache=False).rule("HEADS-NOT-DIVISIBLE")
    reader = FakeReader(tool)
    reader.sources["2.0"] = tool.readable(tool.source_text(FakeFiles({"METADATA": "Requires-Dist: ulysses-core", "README.md": "x"})))
    assert reader.sources["2.0"] is None
    assert tool.check_rule(rule, reader, {}) == []
    # while a release whose code lacks the text still gives the lead
    assert tool.readable(tool.source_text(FakeFiles({"ulysses/layer.py": "raise ValueError('other')"}))) is not None


def test_python_attribute_errors_are_not_looked_up() -> None:
    tool = _tool()
    assert tool.parts("AttributeError: module 'flash_attn_2_cuda' has no attribute 'varlen_fwd'") == []
