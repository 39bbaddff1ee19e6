#!/usr/bin/env python3
"""transformers' attention facts per release, read from its PyPI wheels (a developer tool, not
shipped). Writes rules/evidence/transformers_attention.json, which the product
(doctor/rules/callpath.py, `path.model_supports_attention`) and the seeded tests
(tests/rules/test_upstream_seeded.py) both read.

`releases` (one line a release; `same_as: VERSION` where the facts equal an earlier release's):
- `implementations`: the attn_implementation names modeling_utils.py accepts (eager, sdpa,
  flash_attention_2, flash_attention_3, flex_attention);
- `flash_attn_min`: the flash-attn version is_flash_attn_2_available asks for on CUDA
  (">2.0.0" in 4.34, where the check lives in modeling_utils); 4.34-4.35 have no
  attn_implementation argument, only use_flash_attention_2=True (`use_flash_attention_2_flag`);
- `torch_floor`: the torch version below which transformers disables torch ("PyTorch >= X is
  required"), or null before 4.52;
- `sdpa_torch_min`: the torch version is_torch_sdpa_available asks for, or null.

`models` (one line a model family): for each `transformers/models/<family>/` folder, the releases
where the set of attention implementations its classes declare changed, and the new set (null
where the family left the package). A family's set is read from the class flags
`_supports_sdpa`, `_supports_flash_attn_2` / `_supports_flash_attn`, `_supports_flash_attn_3`
and `_supports_flex_attn` set to True (or defined as a property) in its modeling_*.py; transformers checks these flags when
a model is loaded with `attn_implementation=...` and raises when one is missing (GPT-2 has never
set `_supports_flex_attn`). From 4.54 `_supports_flash_attn` covers FlashAttention 2 and 3;
before it, `_supports_flash_attn_2` covered FlashAttention 2 only. The folder name is taken as
the model_type (true for the families the catalogue names: llama, qwen2, gpt2, gemma2, ...).

    python tools/hf_attention_facts.py [--cache DIR] [--scan ">=4.34"] [--out FILE]

Downloads through tools/_artifacts.py (the cache tools/evidence.py fills).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _artifacts  # noqa: E402

IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
# A flag set to True, or defined as a property (composite models such as llava 4.37-4.45 forward
# their language model's flag): transformers reads the flag on the class, where a property
# object is truthy, so loading with that implementation passes (run with transformers 4.44.2).
FLAGS = {
    "sdpa": re.compile(r"^\s+(?:_supports_sdpa\s*=\s*True|def _supports_sdpa\(self\))", re.M),
    "flash_attention_2": re.compile(r"^\s+(?:_supports_flash_attn(?:_2)?\s*=\s*True|def _supports_flash_attn(?:_2)?\(self\))", re.M),
    "flash_attention_3": re.compile(r"^\s+(?:_supports_flash_attn(?:_3)?\s*=\s*True|def _supports_flash_attn(?:_3)?\(self\))", re.M),
    "flex_attention": re.compile(r"^\s+(?:_supports_flex_attn\s*=\s*True|def _supports_flex_attn\(self\))", re.M),
}
FA3_ONLY = re.compile(r"^\s+_supports_flash_attn_3\s*=\s*True", re.M)
MODELING = "transformers/models/*/modeling_*.py"
FAMILY = re.compile(r"^transformers/models/([a-z0-9_]+)/modeling_[a-z0-9_]+\.py$")


def facts(files: Any) -> Dict[str, Any]:
    """The release-wide facts of one wheel (modeling_utils.py and utils/import_utils.py)."""
    mu = files.text("transformers/modeling_utils.py") if files.glob("transformers/modeling_utils.py") else ""
    iu = files.text("transformers/utils/import_utils.py") if files.glob("transformers/utils/import_utils.py") else ""
    impls = [name for name in IMPLEMENTATIONS if f'"{name}"' in mu or f"'{name}'" in mu]
    if "eager" not in impls and impls:
        impls.insert(0, "eager")
    fa_min: Optional[str] = None
    m = re.search(r"Only allow versions >= (\d+\.\d+\.\d+)", iu)
    if m:
        fa_min = ">=" + m.group(1)
    else:
        m = re.search(r'(?:importlib\.metadata\.version\(\s*"flash_attn"\s*\)\s*\)|flash_attn_version\))\s*>=\s*version\.parse\("(\d+\.\d+\.\d+)"\)', iu)
        if m:
            fa_min = ">=" + m.group(1)
        else:
            m = re.search(r'flash_attention_version > version\.parse\("(\d+\.\d+\.\d+)"\)', mu)
            fa_min = (">" + m.group(1)) if m else None
    m = re.search(r"PyTorch >= (\d+\.\d+) is required", iu)
    torch_floor = m.group(1) if m else None
    m = re.search(r'def is_torch_sdpa_available\(\):(?:\n(?!def ).*)*?version\.parse\("(\d+\.\d+\.\d+)"\)', iu)
    sdpa_min = m.group(1) if m else None
    out = {"implementations": impls, "flash_attn_min": fa_min, "torch_floor": torch_floor, "sdpa_torch_min": sdpa_min}
    if not impls and "use_flash_attention_2" in mu:
        out["use_flash_attention_2_flag"] = True  # 4.34-4.35: from_pretrained(use_flash_attention_2=True), no attn_implementation
    return out


def model_support(files: Any, merged_flag: bool) -> Dict[str, List[str]]:
    """{family: sorted implementations its classes declare} for one wheel."""
    out: Dict[str, set] = {}
    for name in files.glob(MODELING):
        m = FAMILY.match(name)
        if not m:
            continue
        text = files.text(name)
        impls = out.setdefault(m.group(1), {"eager"})
        for impl, pattern in FLAGS.items():
            hit = (FA3_ONLY if impl == "flash_attention_3" and not merged_flag else pattern).search(text)
            if hit:
                impls.add(impl)
    return {family: sorted(impls) for family, impls in sorted(out.items())}


def change_points(per_release: Sequence[tuple]) -> Dict[str, Dict[str, Optional[List[str]]]]:
    """[(version, {family: impls})] oldest first -> {family: {version: impls or None}}, one entry
    where a family's set changed (None where it disappeared)."""
    out: Dict[str, Dict[str, Optional[List[str]]]] = {}
    last: Dict[str, Optional[List[str]]] = {}
    for version, table in per_release:
        for family in sorted(set(table) | {f for f, v in last.items() if v is not None}):
            now = table.get(family)
            if last.get(family) != now:
                out.setdefault(family, {})[version] = now
                last[family] = now
    return dict(sorted(out.items()))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _artifacts.add_cache_option(ap)
    ap.add_argument("--scan", default=">=4.34", help="releases to read (PEP 440 specifier)")
    ap.add_argument("--out", type=Path, default=_artifacts.ev.ROOT / "rules" / "evidence" / "transformers_attention.json")
    args = ap.parse_args(argv)

    def read(version: str, files: Any) -> Dict[str, Any]:
        merged_flag = tuple(int(x) for x in version.split(".")[:2]) >= (4, 54)
        return {"facts": facts(files), "models": model_support(files, merged_flag)}

    rows, failures = _artifacts.scan("transformers", args.scan, args.cache, read)
    releases = _artifacts.by_release([(a, r["facts"]) for a, r in rows], "facts")
    models = change_points([(a.version, r["models"]) for a, r in rows])
    about = (
        "transformers' attention facts per release (releases) and the attention implementations each model family"
        " declares, by the release where that changed (models); read from its PyPI wheels by tools/hf_attention_facts.py. Do not edit."
    )
    _artifacts.write_json(args.out, {"about": about}, {"releases": releases, "models": models})
    return _artifacts.report(args.out, releases, failures)


if __name__ == "__main__":
    sys.exit(main())
