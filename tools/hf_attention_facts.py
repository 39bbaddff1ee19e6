#!/usr/bin/env python3
"""transformers' attention-implementation facts per release, read from its PyPI wheels (a
developer tool, not shipped). Writes rules/evidence/transformers_attention.json:

- `implementations`: the attn_implementation names modeling_utils.py accepts (eager, sdpa,
  flash_attention_2, flash_attention_3, flex_attention);
- `flash_attn_min`: the flash-attn version is_flash_attn_2_available asks for on CUDA
  (">2.0.0" in 4.34, where the check lives in modeling_utils); 4.34-4.35 have no
  attn_implementation argument, only use_flash_attention_2=True (`use_flash_attention_2_flag`);
- `torch_floor`: the torch version below which transformers disables torch ("PyTorch >= X is
  required"), or null before 4.52;
- `sdpa_torch_min`: the torch version is_torch_sdpa_available asks for, or null.

    python tools/hf_attention_facts.py [--cache DIR] [--scan ">=4.34"] [--out FILE]

Uses tools/evidence.py's download cache. A release whose facts equal the previous one's says
`same_as: VERSION`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evidence as ev  # noqa: E402

IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def facts(files: Any) -> Dict[str, Any]:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("ATTN_DOCTOR_EVIDENCE_CACHE", Path.home() / ".cache" / "attn-doctor-evidence")))
    ap.add_argument("--scan", default=">=4.34")
    ap.add_argument("--out", type=Path, default=ev.ROOT / "rules" / "evidence" / "transformers_attention.json")
    args = ap.parse_args(argv)
    run = ev.Run(args.cache)
    arts = [a for a in run.artifacts("transformers") if ev.version_matches(a.version, args.scan)]
    paths = run.fetch_all("transformers", arts)
    releases: Dict[str, Any] = {}
    prev: Optional[str] = None
    for a in arts:
        if a.version not in paths:
            continue
        f = facts(ev.Files(paths[a.version]))
        if prev is not None and releases[prev].get("facts", releases.get(releases[prev].get("same_as", ""), {}).get("facts")) == f:
            base = releases[prev].get("same_as", prev)
            releases[a.version] = {"artifact": a.filename, "sha256": a.sha256, "same_as": base}
        else:
            releases[a.version] = {"artifact": a.filename, "sha256": a.sha256, "facts": f}
        prev = a.version
    about = "transformers' attention-implementation facts per release, read from its PyPI wheels by tools/hf_attention_facts.py. Do not edit."
    lines = ["{", f" \"about\": {json.dumps(about)},", ' "releases": {']
    items = list(releases.items())
    for i, (v, info) in enumerate(items):
        lines.append(f"  {json.dumps(v)}: {json.dumps(info, sort_keys=True)}" + ("," if i < len(items) - 1 else ""))
    lines += [" }", "}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for f in run.failures:
        print(f"download: {f}", file=sys.stderr)
    print(f"wrote {args.out} ({len(releases)} releases)", file=sys.stderr)
    return 2 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
