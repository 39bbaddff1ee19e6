"""Contract analysis: do the installed callers' calls into their callees still bind?

For every pair in rules/contracts/*.yaml whose caller and callee are both installed, the
caller's files are read with `ast` (doctor.probe.pysource; nothing is imported, torch least of
all) and so are the callee modules they reach:

- imports from the callee (`from flash_attn.flash_attn_interface import _flash_attn_varlen_forward`)
  must name something the callee module defines;
- calls through those names must bind to the callee's signature: no missing required
  parameter, no unexpected keyword, not too many positional arguments. Keywords passed
  through a `**dict` built in the same function count with the `if` tests around each key;
- methods the caller patches onto callee classes (XTuner's dispatch tables) may only call
  `self.<member>` that the class (or a base in the callee) still has, with a binding call.

Version guards are evaluated with the installed versions (doctor.probe.guards); a site whose
outcome depends on a runtime value or an undecidable guard is "undecided" with that test,
never "breaks". Each site becomes one record of the snapshot's `contracts` section.
"""

from __future__ import annotations

import ast
import fnmatch
import glob
import importlib.machinery
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from typing import TYPE_CHECKING

from doctor.probe.contract_specs import Pair, Specs
from doctor.probe.packages import PackageScan

if TYPE_CHECKING:  # the parser and the guard evaluator load only when a result is not cached
    from doctor.probe.guards import Evaluator
    from doctor.probe.pysource import SummaryCache

BINDS, BREAKS, UNDECIDED = "binds", "breaks", "undecided"
_SCAN_FILES, _SCAN_BYTES = 20_000, 160 << 20  # bounds of the name scan in a lazy package (transformers 5.x: ~50 MiB of .py)
_SCAN_ENTRIES = 200_000  # files and folders of any kind listed (a linked data folder need hold no .py)
# Module files no text scan can read: a name they define is spelled in no `.py` file.
_OPAQUE_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES) + (".pyc", ".pyd", ".so")
# `from ..x import *` or `from pkg.x import *`: a star import that may bring names from outside its folder.
_ESCAPING_STAR = re.compile(rb"(?m)^[ \t]*from[ \t]+(?:\.\.|[A-Za-z_])[\w.]*[ \t]+import[ \t]+\*")
# A module-level `__getattr__(name)` may return any name (forwarding to another package, say).
_MODULE_GETATTR = re.compile(rb"(?m)^(?:[ \t]*def[ \t]+__getattr__[ \t]*\([ \t]*\w+[ \t]*(?::[^,)]*)?\)|__getattr__[ \t]*=)")
_ALL_AT = re.compile(rb"(?m)^__all__[ \t]*\+?=[ \t]*([\[(])")
_BRACKET_TOKENS = re.compile(rb"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|#[^\n]*|[\[\]()]")


def literal_all(text: bytes) -> Optional[Set[str]]:
    """The names a module's `__all__` lists, when every mention of `__all__` is a module-level
    `__all__ = [...]` / `__all__ += [...]` of string literals; None when `__all__` is computed
    (a comprehension, `dir()`, another module's `__all__`, an annotated or conditional assignment)
    or absent: then `import *` may bring any name the file binds."""
    hits = list(_ALL_AT.finditer(text))
    if not hits or len(hits) != text.count(b"__all__") or len(hits) > 50:
        return None
    names: Set[str] = set()
    for m in hits:
        depth, end = 0, None
        for t in _BRACKET_TOKENS.finditer(text, m.start(1)):
            tok = t.group()
            if tok in (b"[", b"("):
                depth += 1
            elif tok in (b"]", b")"):
                depth -= 1
                if depth == 0:
                    end = t.end()
                    break
        if end is None:
            return None
        try:
            value = ast.literal_eval(text[m.start(1):end].decode())
        except (ValueError, TypeError, SyntaxError, UnicodeDecodeError, RecursionError, MemoryError):
            return None
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return None
        names.update(value)
    return names


@dataclass(frozen=True)
class Target:
    """What a dotted callee name resolves to."""

    kind: str  # def | class | name | module | missing | lazy | nofile | external
    symbol: str
    sig: Optional[Dict[str, Any]] = None
    where: Optional[str] = None  # file:line of the definition
    cls: Optional[Dict[str, Any]] = None
    module: Optional[str] = None


class Callee:
    """The callee's installed modules, resolved lazily through the summary cache."""

    def __init__(self, scan: PackageScan, tops: Sequence[str], cache: SummaryCache) -> None:
        self.scan = scan
        self.tops = tuple(tops)
        self.cache = cache
        self._text: Dict[str, Optional[Dict[str, bytes]]] = {}
        self._exp: Dict[Tuple[str, str], Optional[Tuple[Set[str], Set[str]]]] = {}
        self._opaque: Set[str] = set()  # tops holding compiled or sourceless modules
        self._escapes: Dict[str, Set[str]] = {}  # top -> folders holding a star import that leaves them
        self._all: Dict[str, Optional[Set[str]]] = {}

    def owns(self, module: str) -> bool:
        return module.split(".")[0] in self.tops

    def file(self, module: str) -> Tuple[Optional[str], bool]:
        top, *rest = module.split(".")
        base = self.scan.modules.get(top)
        if base is None:
            return None, False
        if base.endswith(".py") and not rest:
            return base, False
        if not os.path.isdir(base):
            return None, False  # a compiled extension: nothing to read
        path = os.path.join(base, *rest)
        if os.path.isfile(path + ".py"):
            return path + ".py", False
        init = os.path.join(path, "__init__.py")
        return (init, True) if os.path.isfile(init) else (None, False)

    def summary(self, module: str) -> Optional[Dict[str, Any]]:
        path, is_pkg = self.file(module)
        return self.cache.get(path, module, is_pkg) if path else None

    def rel(self, module: str, line: int) -> str:
        path, _ = self.file(module)
        return f"{_relpath(path, self.scan) if path else module}:{line}"

    def lookup(self, module: str, name: str, depth: int = 0) -> Target:
        symbol = f"{module}.{name}"
        if depth > 8:
            return Target("name", symbol)
        s = self.summary(module)
        if s is None:
            path, _ = self.file(module)
            sub, _ = self.file(symbol)
            if sub:
                return Target("module", symbol, module=symbol)
            return Target("nofile", symbol)
        if name in s["defs"]:
            d = s["defs"][name]
            return Target("def", symbol, sig=d, where=self.rel(module, d["line"]))
        if name in s["classes"]:
            c = s["classes"][name]
            return Target("class", symbol, cls=c, where=self.rel(module, c["line"]), module=module)
        for imp in reversed(s["imports"]):
            if imp["alias"] == name and not imp["scope"]:
                if imp["name"] is None:
                    return Target("module", symbol, module=imp.get("full", imp["module"]))
                if self.owns(imp["module"]):
                    return self.lookup(imp["module"], imp["name"], depth + 1)
                return Target("external", symbol)
        if name in s["names"]:
            return Target("name", symbol)
        lazy = bool(s["lazy"])
        for star in s["star"]:
            if self.owns(star) and self.may_define(star, name):
                t = self.lookup(star, name, depth + 1)
                if t.kind == "lazy":
                    lazy = True  # a lazy package re-exported with *: the next star may still define it
                elif t.kind not in ("missing", "nofile"):
                    return t
        sub, _ = self.file(symbol)
        if sub:
            return Target("module", symbol, module=symbol)
        if lazy:
            if depth == 0 and self.absent_everywhere(module, name):
                return Target("missing", symbol)
            return Target("lazy", symbol)
        return Target("missing", symbol)

    def _texts(self, top: str) -> Optional[Dict[str, bytes]]:
        """Every Python file of the callee's top package, read once (None past the bounds)."""
        if top in self._text:
            return self._text[top]
        base = self.scan.modules.get(top)
        out: Optional[Dict[str, bytes]] = None
        if base is not None and os.path.isdir(base):
            out, total = {}, 0
            seen: Set[str] = set()
            escapes: Set[str] = set()
            failed: List[OSError] = []  # a folder os.walk could not list: its files are unread
            entries = 0
            # followlinks: Python imports through a symlinked folder; `seen` stops link cycles
            for root, dirs, names in os.walk(base, onerror=failed.append, followlinks=True):
                entries += len(dirs) + len(names)
                if failed or entries > _SCAN_ENTRIES:
                    out = None
                    break
                real = os.path.realpath(root)
                if real in seen:
                    dirs[:] = []
                    continue
                seen.add(real)
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                if any(n.endswith(_OPAQUE_SUFFIXES) for n in names):
                    self._opaque.add(top)
                for fname in sorted(n for n in names if n.endswith(".py")):
                    path = os.path.join(root, fname)
                    try:
                        size = os.path.getsize(path)
                        total += size
                        if len(out) >= _SCAN_FILES or total > _SCAN_BYTES:
                            out = None
                            break
                        with open(path, "rb") as fh:
                            out[path] = fh.read(size + 1)
                        if _ESCAPING_STAR.search(out[path]):
                            d = root
                            while d.startswith(base) and d not in escapes:
                                escapes.add(d)
                                d = os.path.dirname(d)
                    except OSError:
                        out = None
                        break
                if out is None:
                    break
            if failed:
                out = None
            self._escapes[top] = escapes
        if out is not None:
            self.cache.touched.update(out)
        self._text[top] = out
        return out

    def _spells(self, data: bytes, name: str) -> bool:
        return name.encode() in data and re.search(rb"(?<![\w])" + re.escape(name.encode()) + rb"(?![\w])", data) is not None

    def _exporters(self, top: str, name: str) -> Optional[Tuple[Set[str], Set[str]]]:
        """(files that may export `name`, the folders holding them), once per name.

        A file whose `__all__` is a literal list (`literal_all`) exports through `import *`
        only what that list names, whatever its docstrings mention."""
        key = (top, name)
        if key in self._exp:
            return self._exp[key]
        texts = self._texts(top)
        out: Optional[Tuple[Set[str], Set[str]]] = None
        if texts is not None:
            files: Set[str] = set()
            folders: Set[str] = set()
            for path, text in texts.items():
                if not self._spells(text, name):
                    continue
                if path not in self._all:
                    self._all[path] = literal_all(text)
                listed = self._all[path]
                if listed is not None and name not in listed:
                    continue  # named only in docs or code; `import *` cannot export it
                files.add(path)
                d = os.path.dirname(path)
                while d.startswith(self.scan.modules[top]) and d not in folders:
                    folders.add(d)
                    d = os.path.dirname(d)
            out = (files, folders)
        self._exp[key] = out
        return out

    def may_define(self, module: str, name: str) -> bool:
        """False only when `import *` of `module` cannot bring `name`: neither its file (for a
        package, any file under it) may export the name, nor does it re-export a module outside
        with `import *` (from any file under it). Saves parsing the hundreds of model packages a lazy
        `from .models import *` reaches."""
        top = module.split(".")[0]
        texts = self._texts(top)
        exp = self._exporters(top, name)
        path, is_pkg = self.file(module)
        if texts is None or exp is None or path is None or path not in texts:
            return True
        files, folders = exp
        if path in files:
            return True
        text = texts[path]
        if is_pkg:
            folder = os.path.dirname(path)
            # some file under it may export the name, or star-imports from outside the folder
            return folder in folders or folder in self._escapes.get(top, set())
        return b"import *" in text

    def absent_everywhere(self, module: str, name: str) -> bool:
        """True when the identifier `name` occurs in no Python file of `module`'s top package.

        A lazy module (transformers' `_LazyModule`) maps exported names to submodules through
        string tables, `__all__` lists and TYPE_CHECKING imports, all of which spell the name:
        where no file spells it, no import of it can succeed. Bounded: a package of more than
        _SCAN_FILES files or _SCAN_BYTES bytes is not read (the import stays undecided). Nor is
        absence claimed where a package holds compiled or sourceless modules (they may define
        anything) or where the module has its own `__getattr__(name)` (it may forward anywhere)."""
        top = module.split(".")[0]
        texts = self._texts(top)
        if texts is None or not name.isidentifier() or top in self._opaque:
            return False
        path, is_pkg = self.file(module)
        if path is None or path not in texts or _MODULE_GETATTR.search(texts[path]):
            return False
        if is_pkg and os.path.isdir(os.path.join(os.path.dirname(path), name)):
            return False  # a folder without __init__.py: `from pkg import name` imports it as a namespace package
        return not any(self._spells(t, name) for t in texts.values())

    def resolve(self, dotted_name: str) -> Target:
        """`pkg.mod.attr` -> the definition: the longest module prefix with a file, then names."""
        parts = dotted_name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            if self.file(module)[0] is None:
                continue
            t = self.lookup(module, parts[i])
            for name in parts[i + 1 :]:
                if t.kind == "module" and t.module:
                    t = self.lookup(t.module, name)
                else:
                    return Target("deep", dotted_name)  # Cls.method or obj.attr (logger.warning): not followed
            return t
        return Target("nofile", dotted_name)

    def accepts(self, dotted_name: str) -> Optional[Set[str]]:
        t = self.resolve(dotted_name)
        if t.kind == "def" and t.sig is not None:
            return {p[0] for p in t.sig["params"]}
        return None

    # ------------------------------------------------------------------ classes
    def member(self, cls: Dict[str, Any], module: str, name: str, pair: Pair, depth: int = 0) -> Tuple[str, Any]:
        """('method', (sig, where)) | ('attr', where) | ('missing', why) | ('undecided', why)."""
        if name in cls["methods"]:
            return "method", (cls["methods"][name], self.rel(module, cls["methods"][name]["line"]))
        if name in cls["attrs"]:
            return "attr", self.rel(module, cls["line"])
        s = self.summary(module) or {"imports": [], "classes": {}}
        unresolved: List[str] = []
        for base in cls["bases"]:
            if base in ("object", "Generic") or base.startswith(("Generic[", "Protocol")):
                continue
            target: Optional[Target] = None
            if base in s["classes"]:
                target = Target("class", f"{module}.{base}", cls=s["classes"][base], module=module)
            else:
                head, _, rest = base.partition(".")
                for imp in s["imports"]:
                    if imp["alias"] == head and not imp["scope"] and imp["name"] is not None and self.owns(imp["module"]) and not rest:
                        target = self.lookup(imp["module"], imp["name"])
                        break
            if target is not None and target.kind == "class" and target.cls is not None and target.module and depth < 12:
                kind, info = self.member(target.cls, target.module, name, pair, depth + 1)
                if kind in ("method", "attr", "undecided"):
                    return kind, info
                continue
            if base in pair.external_bases and pair.external_lacks and re.search(pair.external_lacks, name):
                continue
            unresolved.append(base)
        if unresolved:
            return "undecided", f"base class {', '.join(unresolved)} is outside the analysed code"
        return "missing", None

    def find_class(self, name: str, root: str, files: str) -> Optional[Target]:
        """The class `name` in `<root>/<folder>/<files>`, trying folders whose name prefixes it."""
        top = root.split("/")[0]
        base = self.scan.modules.get(top)
        if base is None or not os.path.isdir(base):
            return None
        folder = os.path.join(os.path.dirname(base), root)
        self.cache.touched.add(folder + os.sep + ".")
        try:
            subdirs = sorted(os.listdir(folder), key=len, reverse=True)
        except OSError:
            return None
        low = name.lower()
        needle = f"class {name}(".encode()
        for d in subdirs:
            if not low.startswith(d.replace("_", "")):
                continue
            self.cache.touched.add(os.path.join(folder, d, "."))
            for path in sorted(glob.glob(os.path.join(folder, d, files))):
                self.cache.touched.add(path)
                try:
                    with open(path, "rb") as fh:
                        if needle not in fh.read():
                            continue
                except OSError:
                    continue
                module = ".".join([*root.split("/"), d, Path(path).stem])
                s = self.cache.get(path, module)
                if s and name in s["classes"]:
                    c = s["classes"][name]
                    return Target("class", f"{module}.{name}", cls=c, where=self.rel(module, c["line"]), module=module)
        return None


def _relpath(path: str, scan: PackageScan) -> str:
    for p in sorted(scan.paths, key=len, reverse=True):
        if path.startswith(p.rstrip("/") + "/"):
            return path[len(p.rstrip("/")) + 1 :]
    return path


# --------------------------------------------------------------------------- binding


def bind(sig: Dict[str, Any], call: Mapping[str, Any], kw_present: Sequence[str],
         kw_maybe: Mapping[str, str], opaque: bool, bound_method: bool) -> Tuple[str, str]:
    """Does a call with `npos` positional and these keywords bind to `sig`? (verdict, reason).

    An undecided reason that starts with "breaks when" is a certain mismatch on some paths
    (a keyword the callee does not take, passed under a runtime test)."""
    params = [p for p in sig["params"]]
    if bound_method and params and params[0][1] in ("po", "pk"):
        params = params[1:]
    positional = [p for p in params if p[1] in ("po", "pk")]
    has_var = any(p[1] == "var" for p in params)
    has_varkw = any(p[1] == "varkw" for p in params)
    names = {p[0]: p for p in params if p[1] in ("pk", "ko")}
    npos = int(call["npos"])
    star = bool(call["star"])
    if npos > len(positional) and not has_var:
        return BREAKS, f"takes {len(positional)} positional arguments but {npos} are given"
    filled = {p[0] for p in positional[:npos]}
    explicit = list(call["kw"]) + list(kw_present)
    for k in explicit:
        if k not in names and not has_varkw:
            return BREAKS, f"unexpected keyword argument '{k}'"
        if k in filled:
            return BREAKS, f"got multiple values for argument '{k}'"
    undecided: List[str] = []
    for k, why in kw_maybe.items():
        if k not in names and not has_varkw:
            undecided.append(f"passes '{k}', which it does not take, when {why}")
    given = filled | set(explicit)
    missing = [p[0] for p in params if p[1] in ("po", "pk", "ko") and not p[2] and p[0] not in given]
    hard = []
    for m in missing:
        if m in kw_maybe:
            undecided.append(f"'{m}' is passed only when {kw_maybe[m]}")
        elif star or opaque:
            undecided.append(f"'{m}' may come from *args/**kwargs the analysis cannot read")
        else:
            hard.append(m)
    if hard:
        plural = "s" if len(hard) > 1 else ""
        return BREAKS, f"missing required argument{plural} {', '.join(repr(m) for m in hard)}"
    if undecided:
        certain = [u for u in undecided if "which it does not take" in u]
        if certain and len(certain) == len(undecided):
            return UNDECIDED, "breaks when it " + "; ".join(certain)
        return UNDECIDED, "; ".join(undecided)
    return BINDS, "binds"


def _positional(call: Mapping[str, Any], s: Mapping[str, Any], ev: "Evaluator",
                path: Mapping[str, bool]) -> Tuple[int, bool]:
    """(positional count, still unknown?) with `*lst` counted where the function builds `lst`
    from literals and appends whose tests are decided on this path."""
    npos, unknown = int(call["npos"]), False
    for var in call.get("starred", [None] if call["star"] else []):
        ops = (s.get("lists", {}).get(call["scope"], {}) or {}).get(var or "", [])
        count: Optional[int] = None  # None: not known (a parameter, a call's result, an undecided test)
        for op in sorted((o for o in ops if o["line"] < call["line"]), key=lambda o: o["line"]):
            runs = ev.all_true(op["guards"], path)
            if runs is False:
                continue
            if runs is None:
                count = None
                break
            if op["op"] == "set":
                count = op["n"]
            else:
                count = None if count is None or op["n"] is None else count + int(op["n"])
        if count is None:
            unknown = True
        else:
            npos += int(count)
    return npos, unknown


def _path(*chains: Sequence[Mapping[str, Any]]) -> Dict[str, bool]:
    """{test: value} for the `if` tests that hold where the code runs."""
    out: Dict[str, bool] = {}
    for chain in chains:
        for g in chain:
            src = str(g["src"])
            if not src.startswith("<"):
                out[src] = not g["neg"]
    return out


def _kwargs(call: Mapping[str, Any], funcs: Mapping[str, Any], ev: "Evaluator",
            path: Optional[Mapping[str, bool]] = None) -> Tuple[List[str], Dict[str, str], bool]:
    """Keywords a call passes through `**name` dicts: (present, {maybe: when}, opaque).

    A key set before the call counts with the call's own tests taken as true; one set after it
    (a loop's next turn) at most as "maybe"."""
    present: List[str] = []
    maybe: Dict[str, str] = {}
    opaque = False
    table = funcs.get(call["scope"], {})
    for var in call["dstar"]:
        d = table.get(var) if var else None
        if d is None:
            opaque = True
            continue
        opaque = opaque or bool(d["opaque"])
        state: Dict[str, Tuple[Optional[bool], str]] = {}
        for entry in d["keys"]:
            guards = [g for g in entry["guards"] if not (path and path.get(str(g["src"])) == (not g["neg"]))]
            t = ev.all_true(guards, path)
            if t is True and entry["line"] > call["line"]:
                t = None
            cond = " and ".join(("not " if g["neg"] else "") + f"({g['src']})" for g in guards) or "always"
            prev = state.get(entry["key"])
            if t is True or prev is None or (prev[0] is False and t is None):
                state[entry["key"]] = (t, f"{cond} (line {entry['line']})")
        for k, (t, why) in state.items():
            if t is True:
                present.append(k)
            elif t is None:
                maybe[k] = why
    return present, maybe, opaque


# --------------------------------------------------------------------------- analysis


@dataclass
class _Site:
    pair: str
    kind: str
    site: str
    symbol: str
    verdict: str
    reason: str
    signature: Optional[str] = None
    defined_at: Optional[str] = None

    def row(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"pair": self.pair, "kind": self.kind, "site": self.site, "symbol": self.symbol,
               "verdict": self.verdict, "reason": self.reason}
        if self.verdict == UNDECIDED and self.reason.startswith("breaks when"):
            out["conditional"] = True  # a certain mismatch on the paths the reason names
        if self.verdict != BINDS:  # where a call binds, the signature adds nothing but bytes
            if self.signature:
                out["signature"] = self.signature
            if self.defined_at:
                out["defined_at"] = self.defined_at
        return out


def _module_name(rel: str) -> Tuple[str, bool]:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _wanted(pair: Pair, module: str) -> bool:
    if pair.check_imports:
        return any(fnmatch.fnmatchcase(module, p) for p in pair.check_imports)
    return module.split(".")[0] in pair.callee_modules


def _evaluator(s: Mapping[str, Any], scan: PackageScan, callee: Callee, pair: Pair) -> Tuple["Evaluator", Dict[str, str]]:
    """The module's guard evaluator. The tests a callee import sits under are assumed to hold:
    the calls analysed are those made when the callee was imported."""
    from doctor.probe.guards import Evaluator

    imports: Dict[str, str] = {}
    assume: List[str] = []
    for imp in s["imports"]:
        if imp["scope"]:
            continue
        imports[imp["alias"]] = imp.get("full", imp["module"]) if imp["name"] is None else f"{imp['module']}.{imp['name']}"
        if callee.owns(imp["module"]):
            assume.extend(str(g["src"]) for g in imp["guards"] if not g["neg"] and not str(g["src"]).startswith("<except"))
    versions = {n: d.version for n, d in scan.dists.items()}
    modules = {m: pair.callee_dist for m in pair.callee_modules}
    present = scan.has_module
    plain = Evaluator(imports, s["consts"], versions, modules, callee.accepts, pair.helpers, (), present)
    # an assumption that the versions refute (TE 1.11: `_flash_attn_version >= required`) is dropped
    assume = [a for a in dict.fromkeys(assume) if plain.test(a) is not False]
    return Evaluator(imports, s["consts"], versions, modules, callee.accepts, pair.helpers, assume, present), imports


def _caller_files(pair: Pair, site_dir: str, pattern_bytes: "re.Pattern[bytes]", touched: Set[str]) -> List[str]:
    out: List[str] = []
    for pattern in pair.caller_files:
        for path in sorted(glob.glob(os.path.join(site_dir, pattern), recursive=True)):
            if path in out or not path.endswith(".py"):
                continue
            touched.add(path)
            try:
                with open(path, "rb") as fh:
                    if not pattern_bytes.search(fh.read()):
                        continue
            except OSError:
                continue
            out.append(path)
    return out


def _check_module(pair: Pair, rel: str, s: Mapping[str, Any], scan: PackageScan, callee: Callee,
                  sites: List[_Site], only_scopes: Optional[Tuple[str, str, Target]] = None) -> None:
    ev, imports = _evaluator(s, scan, callee, pair)
    skip_aliases: Set[str] = set()
    # imports (checked without the import-guard assumption the calls use)
    plain = ev.without_assumptions()
    lazy_file = any(fnmatch.fnmatchcase(rel, g) or rel.endswith("/" + g) for g in pair.lazy_files)
    for imp in s["imports"] if only_scopes is None else ():
        if not callee.owns(imp["module"]) or not _wanted(pair, imp["module"]):
            continue
        where = f"{rel}:{imp['line']}"
        active = plain.all_true(imp["guards"])
        if active is False:
            skip_aliases.add(imp["alias"])
            continue
        symbol = imp["module"] if imp["name"] is None else f"{imp['module']}.{imp['name']}"
        if imp["name"] is None:
            t = Target("module", symbol) if callee.file(imp["module"])[0] else Target("nofile", symbol)
        else:
            t = callee.lookup(imp["module"], imp["name"])
        if t.kind == "nofile" and callee.file(imp["module"].split(".")[0])[0] is not None and callee.file(imp["module"])[0] is None:
            t = Target("missing", symbol)  # the callee package is there, this module of it is not
            what = f"transformers has no module {imp['module']}".replace("transformers", imp["module"].split(".")[0], 1)
        else:
            what = f"{imp['module']} has no '{imp['name']}'"
        if t.kind == "missing":
            if imp["try"]:
                sites.append(_Site(pair.id, "import", where, symbol, BINDS, f"absent ({what}), but the import sits in try/except ImportError"))
            elif active is None or imp["scope"] or lazy_file:
                when = (f"when {' and '.join(('not ' if g['neg'] else '') + g['src'] for g in imp['guards'])}" if active is None
                        else f"when {imp['scope']}() runs" if imp["scope"] else f"when {rel} is imported (only on some paths)")
                sites.append(_Site(pair.id, "import", where, symbol, UNDECIDED, f"breaks {when}: {what}"))
            else:
                sites.append(_Site(pair.id, "import", where, symbol, BREAKS, what))
        elif t.kind in ("lazy", "nofile"):
            sites.append(_Site(pair.id, "import", where, symbol, UNDECIDED,
                               "the module resolves names lazily" if t.kind == "lazy" else "no Python source for the module"))
        else:
            sites.append(_Site(pair.id, "import", where, symbol, BINDS, "defined", defined_at=t.where))
    # calls
    for call in s["calls"]:
        head, _, rest = call["func"].partition(".")
        if only_scopes is not None:
            func, cls_name, cls_t = only_scopes
            if not (call["scope"] == func or call["scope"].startswith(func + ".")):
                continue
            if head != "self" or not rest or "." in rest:
                continue
            _check_patch_call(pair, rel, call, s, ev, callee, cls_name, cls_t, sites)
            continue
        for full, via in _targets(call, head, rest, imports, skip_aliases, s, ev):
            if not callee.owns(full) or not _wanted(pair, full.rpartition(".")[0] or full):
                continue
            n = len(sites)
            _check_call(pair, rel, call, full, via, s, ev, callee, sites)
            # module-level code that runs only on some machines or when a lazily imported file
            # is loaded: a certain mismatch there is conditional
            if len(sites) > n and sites[-1].verdict == BREAKS and not call["scope"]:
                reach = plain.all_true(call["guards"])
                if reach is None or lazy_file:
                    why = (" and ".join(('not ' if g['neg'] else '') + g['src'] for g in call["guards"])
                           if reach is None else f"{rel} is imported (only on some paths)")
                    sites[-1].verdict = UNDECIDED
                    sites[-1].reason = f"breaks when {why}: {sites[-1].reason}"


def _targets(call: Mapping[str, Any], head: str, rest: str, imports: Mapping[str, str], skip: Set[str],
             s: Mapping[str, Any], ev: "Evaluator") -> List[Tuple[str, Optional[Tuple[str, Optional[bool], str, Any]]]]:
    """The callee symbols a call may reach: through an imported name, or a local variable that
    the function sets to one (`fwd = _flash_attn_varlen_fwd if thd else _flash_attn_fwd`).
    For the latter: (local name, does the assignment certainly run, its tests)."""
    if head in imports and head not in skip:
        return [(imports[head] + (f".{rest}" if rest else ""), None)]
    out: List[Tuple[str, Optional[Tuple[str, Optional[bool], str, Any]]]] = []
    for a in (s.get("aliases", {}).get(call["scope"], {}) or {}).get(head, []) if not rest else []:
        thead, _, trest = a["target"].partition(".")
        if thead not in imports or thead in skip or a["line"] > call["line"]:
            continue
        guards = _strip_shared(a["guards"], call["guards"])
        runs = ev.all_true(guards, _path(call["guards"]))
        if runs is False:
            continue  # this branch is not taken with the installed versions, or not on this path
        cond = " and ".join(("not " if g["neg"] else "") + f"({g['src']})" for g in guards) or "always"
        out.append((imports[thead] + (f".{trest}" if trest else ""), (head, runs, cond, guards)))
    return out


def _strip_shared(guards: Sequence[Mapping[str, Any]], call_guards: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    shared = 0
    for a, b in zip(guards, call_guards):
        if a != b:
            break
        shared += 1
    return list(guards[shared:])


def _check_call(pair: Pair, rel: str, call: Mapping[str, Any], full: str,
                via: Optional[Tuple[str, Optional[bool], str, Any]], s: Mapping[str, Any], ev: "Evaluator",
                callee: Callee, sites: List["_Site"]) -> None:
    """One call (or one callee a local variable may hold) against the installed definition."""
    from doctor.probe.pysource import render_signature

    if ev.all_true(call["guards"]) is False:
        return  # on a branch these versions never take
    t = callee.resolve(full)
    where = f"{rel}:{call['line']}"
    note = f" (through `{via[0]}`, set when {via[2]})" if via is not None else ""
    if t.kind in ("def", "class"):
        sig = t.sig
        bound = False
        if t.kind == "class" and t.cls is not None:
            sig = t.cls["methods"].get("__init__")
            bound = True
        if sig is None:
            return  # __init__ inherited or generated (dataclasses): not followed
        path = _path(call["guards"], via[3] if via else ())
        present, maybe, opaque = _kwargs(call, s["funcs"], ev, path)
        npos, star = _positional(call, s, ev, path)
        verdict, reason = bind(sig, {**call, "npos": npos, "star": star}, present, maybe, opaque, bound)
        if verdict == BREAKS and via is not None and via[1] is None:
            verdict = UNDECIDED  # breaks only where the local variable holds this function
            reason, note = f"breaks when `{via[0]}` holds this function, set when {via[2]}: {reason}", ""
        sites.append(_Site(pair.id, "call", where, t.symbol, verdict, reason + note,
                           render_signature(t.symbol.rsplit(".", 1)[-1], sig), t.where))
    elif t.kind == "missing":
        verdict = UNDECIDED if via is not None and via[1] is None else BREAKS
        sites.append(_Site(pair.id, "call", where, t.symbol, verdict,
                           f"{t.symbol.rpartition('.')[0]} has no '{t.symbol.rpartition('.')[2]}'" + note))
    elif t.kind in ("lazy", "nofile", "name"):
        sites.append(_Site(pair.id, "call", where, t.symbol, UNDECIDED, {
            "lazy": "the module resolves names lazily", "nofile": "no Python source for the module",
            "name": "not a plain function (assigned or wrapped at import time)"}[t.kind] + note))


def _check_patch_call(pair: Pair, rel: str, call: Mapping[str, Any], s: Mapping[str, Any], ev: Evaluator,
                      callee: Callee, cls_name: str, cls_t: Target, sites: List[_Site]) -> None:
    member = call["func"].split(".", 1)[1]
    where = f"{rel}:{call['line']}"
    symbol = f"{cls_t.symbol}.{member}"
    assert cls_t.cls is not None and cls_t.module is not None
    kind, info = callee.member(cls_t.cls, cls_t.module, member, pair)
    if kind == "missing":
        sites.append(_Site(pair.id, "patch", where, symbol, BREAKS,
                           f"{cls_name} no longer has '{member}', which the forward {rel} patches onto it calls", defined_at=cls_t.where))
    elif kind == "undecided":
        sites.append(_Site(pair.id, "patch", where, symbol, UNDECIDED, str(info)))
    elif kind == "attr":
        sites.append(_Site(pair.id, "patch", where, symbol, BINDS, "an attribute set by the class; its call is not checked"))
    else:
        sig, at = info
        bound = "staticmethod" not in sig.get("decorators", [])
        present, maybe, opaque = _kwargs(call, s["funcs"], ev, _path(call["guards"]))
        verdict, reason = bind(sig, call, present, maybe, opaque, bound)
        from doctor.probe.pysource import render_signature

        sites.append(_Site(pair.id, "patch", where, symbol, verdict, reason, render_signature(member, sig), at))


def _patches(pair: Pair, site_dir: str, scan: PackageScan, callee: Callee, cache: SummaryCache, sites: List[_Site]) -> None:
    for table in pair.patches:
        path = os.path.join(site_dir, table.file)
        module, is_pkg = _module_name(table.file)
        s = cache.get(path, module, is_pkg)
        if s is None:
            continue
        seen: Set[Tuple[str, str, str]] = set()
        for tname in table.names:
            for cls_name, (mod, func) in (s["tables"].get(tname) or {}).items():
                mod = mod or module
                if (cls_name, mod, func) in seen:
                    continue
                seen.add((cls_name, mod, func))
                cls_t = callee.find_class(cls_name, table.classes_root, table.classes_files)
                if cls_t is None:
                    continue  # the installed callee has no such model: nothing is patched
                rel = mod.replace(".", "/") + ".py"
                fpath = os.path.join(site_dir, rel)
                if not os.path.isfile(fpath):
                    rel = mod.replace(".", "/") + "/__init__.py"
                    fpath = os.path.join(site_dir, rel)
                ms = cache.get(fpath, mod, rel.endswith("__init__.py"))
                if ms is None:
                    continue
                _check_module(pair, rel, ms, scan, callee, sites, only_scopes=(func, cls_name, cls_t))


def analyse(scan: PackageScan, specs: Specs, cache_dir: Optional[Path] = None) -> Dict[str, Any]:
    """The snapshot's `contracts` section: the pairs found installed and one row per site.

    Two caches, both in `cache_dir/contracts`: each file's summary per content hash, and the
    whole result, reused while every file it read and every folder it listed is unchanged."""
    from doctor import __version__
    from doctor.probe.contract_cache import cached_result, result_key, store_result

    from doctor.probe.contract_specs import _to_json

    key = result_key(scan, _to_json(specs))
    if key is None:
        return {"analyser": __version__, "pairs": [], "sites": [], "parsed_files": 0}
    hit = cached_result(cache_dir, key)
    if hit is not None:
        return {**hit, "parsed_files": 0}
    from doctor.probe.pysource import SummaryCache

    cache = SummaryCache(cache_dir)
    pairs_out: List[Dict[str, Any]] = []
    sites: List[_Site] = []
    for pair in specs.pairs:
        caller = scan.dists.get(pair.caller_dist)
        callee_dist = scan.dists.get(pair.callee_dist)
        if caller is None or callee_dist is None:
            continue
        if not any(m in scan.modules for m in pair.callee_modules):
            continue
        callee = Callee(scan, pair.callee_modules, cache)
        before = len(sites)
        # only files that import the callee directly can reach it
        names = b"|".join(re.escape(m.encode()) for m in pair.callee_modules)
        needle = re.compile(rb"(?m)^\s*(?:from|import)\s+(?:" + names + rb")\b")
        for pattern in pair.caller_files:  # a file added to a globbed folder changes its mtime
            head = pattern.split("*")[0]
            touched_dir = os.path.join(caller.site_dir, os.path.dirname(head) if not head.endswith("/") else head.rstrip("/"))
            cache.touched.add(touched_dir + os.sep + ".")
        for path in _caller_files(pair, caller.site_dir, needle, cache.touched):
            rel = _relpath(path, scan)
            module, is_pkg = _module_name(os.path.relpath(path, caller.site_dir).replace(os.sep, "/"))
            s = cache.get(path, module, is_pkg)
            if s is not None:
                _check_module(pair, rel, s, scan, callee, sites)
        _patches(pair, caller.site_dir, scan, callee, cache, sites)
        mine = sites[before:]
        pairs_out.append({
            "id": pair.id,
            "caller": pair.caller_dist,
            "caller_version": caller.version,
            "callee": pair.callee_dist,
            "callee_version": callee_dist.version,
            "sites": len(mine),
            "breaks": sum(1 for x in mine if x.verdict == BREAKS),
            "conditional": sum(1 for x in mine if x.verdict == UNDECIDED and x.reason.startswith("breaks when")),
            "undecided": sum(1 for x in mine if x.verdict == UNDECIDED),
        })
    result = {"analyser": __version__, "pairs": pairs_out, "sites": [x.row() for x in sites]}
    store_result(cache_dir, key, cache.touched, result)
    return {**result, "parsed_files": cache.parsed}
