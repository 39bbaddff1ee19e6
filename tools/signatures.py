#!/usr/bin/env python3
"""Function signatures of a package's Python interface, per release, read from its PyPI artifacts
(a developer tool, not shipped). The default reads flash-attn's public and private entry points
(flash_attn/flash_attn_interface.py, and hopper/flash_attn_interface.py where the sdist ships
FlashAttention 3's) and writes rules/evidence/flash_attn_signatures.json.

    python tools/signatures.py [--cache DIR] [--out FILE] [--package flash-attn] [--file GLOB ...]

A release whose functions equal an earlier one's says `same_as: VERSION` instead of repeating
them. Each function is a list of parameters as written: `name` (required), `name=default`, `*args`,
`**kwargs`, and `*` before keyword-only ones. Downloads through tools/_artifacts.py (the cache
tools/evidence.py fills).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _artifacts  # noqa: E402

DEFAULT_FILES = ("flash_attn/flash_attn_interface.py", "hopper/flash_attn_interface.py")


def _param_list(fn: ast.FunctionDef) -> List[str]:
    a = fn.args
    out: List[str] = []
    pos = list(a.posonlyargs) + list(a.args)
    defaults: List[Optional[ast.expr]] = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (p, d) in enumerate(zip(pos, defaults)):
        out.append(p.arg if d is None else f"{p.arg}={ast.unparse(d)}")
        if a.posonlyargs and i == len(a.posonlyargs) - 1:
            out.append("/")
    if a.vararg:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(p.arg if d is None else f"{p.arg}={ast.unparse(d)}")
    if a.kwarg:
        out.append("**" + a.kwarg.arg)
    return out


def signatures(text: str) -> Dict[str, List[str]]:
    """Module-level functions (and methods, as Class.method) of one Python file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: Dict[str, List[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = _param_list(node)  # type: ignore[arg-type]
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name in ("forward", "backward", "apply"):
                    out[f"{node.name}.{m.name}"] = _param_list(m)  # type: ignore[arg-type]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _artifacts.add_cache_option(ap)
    ap.add_argument("--package", default="flash-attn")
    ap.add_argument("--file", action="append", default=[], help="file inside the artifact (repeatable)")
    ap.add_argument("--scan", default=">=2.0", help="releases to read (PEP 440 specifier)")
    ap.add_argument("--out", type=Path, default=_artifacts.ev.ROOT / "rules" / "evidence" / "flash_attn_signatures.json")
    args = ap.parse_args(argv)
    names = tuple(args.file) or DEFAULT_FILES

    def read(version: str, content: Any) -> Dict[str, Any]:
        return {name: signatures(content.text(name)) for name in names if content.glob(name)}

    rows, failures = _artifacts.scan(args.package, args.scan, args.cache, read)
    releases = _artifacts.by_release(rows, "files")
    about = f"Function signatures of {args.package}'s interface per release, read from its PyPI artifacts by tools/signatures.py. Do not edit."
    _artifacts.write_json(args.out, {"about": about, "package": args.package}, {"releases": releases})
    return _artifacts.report(args.out, releases, failures)


if __name__ == "__main__":
    sys.exit(main())
