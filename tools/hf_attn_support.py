"""Which attention implementations each transformers model family accepts, read from the
released wheels (developer tool; not part of the installed package).

    python tools/hf_attn_support.py [--versions 4.44.2,4.48.0,...] [--cache DIR] [--out FILE]

For each release it downloads the wheel from PyPI (`pip download --no-deps`, cached), reads
every `transformers/models/<family>/modeling_*.py` as text (nothing is imported) and records
which of the class flags `_supports_sdpa`, `_supports_flash_attn_2` / `_supports_flash_attn`,
`_supports_flash_attn_3` and `_supports_flex_attn` some class of that family sets to True.
transformers checks these flags when a model is loaded with `attn_implementation=...` and
raises when the flag is missing (e.g. GPT-2 has never set `_supports_flex_attn`). The result is
rules/releases/transformers-attn-support.json; doctor/rules/callpath.py reads it to decide
`path.model_supports_attention` for the workload's `model_type`.

The family folder name is taken as the model_type (true for the families the catalogue
names: llama, qwen2, gpt2, gemma2, mistral, mixtral, phi3, deepseek_v3, ...).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

DEFAULT_VERSIONS = ["4.36.2", "4.40.2", "4.44.2", "4.48.0", "4.53.0", "4.57.1", "5.0.0", "5.10.4", "5.23.0"]
FLAGS = {
    "sdpa": re.compile(r"^\s+_supports_sdpa\s*=\s*True", re.M),
    "flash_attention_2": re.compile(r"^\s+_supports_flash_attn(?:_2)?\s*=\s*True", re.M),
    "flash_attention_3": re.compile(r"^\s+_supports_flash_attn(?:_3)?\s*=\s*True", re.M),
    "flex_attention": re.compile(r"^\s+_supports_flex_attn\s*=\s*True", re.M),
}
# transformers >= 4.54 merged the FA2/FA3 flags into `_supports_flash_attn` (both kernels);
# before that `_supports_flash_attn_2` covered FlashAttention 2 only.
MODELING = re.compile(r"^transformers/models/([a-z0-9_]+)/modeling_[a-z0-9_]+\.py$")


def wheel(version: str, cache: Path) -> Path:
    found = list(cache.glob(f"transformers-{version}-*.whl"))
    if found:
        return found[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"transformers=={version}", "-d", str(cache)], check=True)
    return next(cache.glob(f"transformers-{version}-*.whl"))


def support(path: Path, version: str) -> Dict[str, List[str]]:
    merged_flag = tuple(int(x) for x in version.split(".")[:2]) >= (4, 54)
    out: Dict[str, set] = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            m = MODELING.match(name)
            if not m:
                continue
            text = z.read(name).decode("utf-8", "replace")
            impls = out.setdefault(m.group(1), {"eager"})
            for impl, pattern in FLAGS.items():
                if impl == "flash_attention_3" and not merged_flag:
                    if re.search(r"^\s+_supports_flash_attn_3\s*=\s*True", text, re.M):
                        impls.add(impl)
                    continue
                if pattern.search(text):
                    impls.add(impl)
    return {family: sorted(impls) for family, impls in sorted(out.items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "attn-doctor-evidence" / "transformers"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "rules" / "releases" / "transformers-attn-support.json"))
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    table = {}
    for version in args.versions.split(","):
        table[version] = support(wheel(version, cache), version)
        print(f"transformers {version}: {len(table[version])} model families", file=sys.stderr)
    doc = {
        "source": "class flags in transformers/models/*/modeling_*.py of each release's wheel on PyPI (tools/hf_attn_support.py)",
        "releases": table,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
