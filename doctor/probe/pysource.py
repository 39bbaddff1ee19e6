"""What one installed Python file defines and calls, read with `ast` (never imported).

`summarize()` turns a module's source into a small JSON-able summary: its imports (with the
`if` guards and `try/except ImportError` around them), module-level constants (as source
text, evaluated later by doctor.probe.guards), functions and classes with their signatures,
and every call whose target is a plain or dotted name, with the keyword arguments it passes
through `**dict` when that dict is built in the same function (`d = {}`, `d["key"] = ...`,
each key with the `if` tests it sits under). The summary depends only on the file's bytes, so
`SummaryCache` keeps it per content hash: parsing TransformerEngine's 8,500-line attention
module once, not on every probe.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# What ast.parse raises on a file that is not Python it can read: a syntax error, NUL bytes
# (ValueError), nesting deeper than the C parser's stack (MemoryError, "s_push: parser stack
# overflow"; 400,000 unary minuses) or than AST construction allows (RecursionError).
PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)

FORMAT = 5
Guard = Dict[str, Any]  # {"src": "a >= b", "neg": bool}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "PackageNotFoundError", "DistributionNotFound",
                  "Exception", "BaseException"}
_VERSION_CALLS = {"version", "get_pkg_version", "get_distribution", "get_version"}


def _try_marker(body: List[ast.stmt]) -> Optional[str]:
    """`<try: modules=a,b; dists=x>`: what a try body needs to run to its end (doctor.probe.guards)."""
    mods: List[str] = []
    dists: List[str] = []
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Import):
                mods.extend(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                mods.append(n.module.split(".")[0])
            elif isinstance(n, ast.Call) and (dotted(n.func) or "").split(".")[-1] in _VERSION_CALLS:
                if n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                    dists.append(n.args[0].value)
    if not mods and not dists:
        return None
    return f"<try: modules={','.join(dict.fromkeys(mods))}; dists={','.join(dict.fromkeys(dists))}>"


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of odd nodes: keep something readable
        return ast.dump(node)


def dotted(node: ast.AST) -> Optional[str]:
    """`a.b.c` for Name/Attribute chains, else None."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def signature(fn: Any) -> Dict[str, Any]:
    """Parameters of a def: [[name, kind, has_default]]; kind po|pk|var|ko|varkw."""
    a = fn.args
    params: List[List[Any]] = []
    pos = list(a.posonlyargs) + list(a.args)
    n_def = len(a.defaults)
    for i, p in enumerate(pos):
        kind = "po" if i < len(a.posonlyargs) else "pk"
        params.append([p.arg, kind, i >= len(pos) - n_def])
    if a.vararg is not None:
        params.append([a.vararg.arg, "var", True])
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append([p.arg, "ko", d is not None])
    if a.kwarg is not None:
        params.append([a.kwarg.arg, "varkw", True])
    decos = [dotted(d.func if isinstance(d, ast.Call) else d) or "?" for d in fn.decorator_list]
    return {"params": params, "line": fn.lineno, "decorators": decos}


def render_signature(name: str, sig: Dict[str, Any]) -> str:
    out: List[str] = []
    seen_var = False
    for pname, kind, has_default in sig["params"]:
        if kind == "var":
            out.append(f"*{pname}")
            seen_var = True
        elif kind == "varkw":
            out.append(f"**{pname}")
        else:
            if kind == "ko" and not seen_var:
                out.append("*")
                seen_var = True
            out.append(f"{pname}=..." if has_default else pname)
    return f"{name}({', '.join(out)})"


class _Func:
    """Per-function state: dicts built for `**` and their keys."""

    def __init__(self) -> None:
        self.dicts: Dict[str, Dict[str, Any]] = {}
        self.aliases: Dict[str, List[Dict[str, Any]]] = {}  # local = imported_name (a function chosen by branch)
        self.lists: Dict[str, List[Dict[str, Any]]] = {}  # lists passed as *args: [{set|add: n, guards, line}]

    def list_op(self, var: str, op: str, n: Optional[int], guards: List[Guard], line: int) -> None:
        self.lists.setdefault(var, []).append({"op": op, "n": n, "guards": list(guards), "line": line})

    def key(self, var: str, key: str, guards: List[Guard], line: int) -> None:
        d = self.dicts.setdefault(var, {"keys": [], "opaque": False})
        d["keys"].append({"key": key, "guards": list(guards), "line": line})

    def opaque(self, var: str) -> None:
        self.dicts.setdefault(var, {"keys": [], "opaque": False})["opaque"] = True


class _Walker:
    def __init__(self, module: str, is_pkg: bool) -> None:
        self.module = module
        self.package = module if is_pkg else module.rpartition(".")[0]
        self.out: Dict[str, Any] = {
            "format": FORMAT,
            "imports": [],
            "consts": {},
            "names": [],
            "defs": {},
            "classes": {},
            "calls": [],
            "funcs": {},
            "star": [],
            "lazy": False,
            "tables": {},
            "aliases": {},
            "lists": {},
        }
        self._names: Dict[str, None] = {}
        self._globals: Dict[str, set] = {}  # function -> names it declares `global`

    # ------------------------------------------------------------------ helpers
    def _abs(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.package.split(".") if self.package else []
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _bind(self, name: str, scope: str) -> None:
        if not scope:
            self._names[name] = None

    # ------------------------------------------------------------------ statements
    def walk(self, stmts: List[ast.stmt], guards: List[Guard], scope: str, func: Optional[_Func],
             cls: Optional[Dict[str, Any]], in_try: bool) -> None:
        for st in stmts:
            self.stmt(st, guards, scope, func, cls, in_try)

    def stmt(self, st: ast.stmt, guards: List[Guard], scope: str, func: Optional[_Func],
             cls: Optional[Dict[str, Any]], in_try: bool) -> None:
        if isinstance(st, ast.Import):
            for a in st.names:
                local = a.asname or a.name.split(".")[0]
                target = a.name if a.asname else a.name.split(".")[0]
                self.out["imports"].append(
                    {"module": target, "name": None, "alias": local, "line": st.lineno,
                     "guards": guards, "try": in_try, "scope": scope, "full": a.name}
                )
                self._bind(local, scope)
            return
        if isinstance(st, ast.ImportFrom):
            mod = self._abs(st)
            for a in st.names:
                if a.name == "*":
                    if not scope:
                        self.out["star"].append(mod)
                    continue
                local = a.asname or a.name
                self.out["imports"].append(
                    {"module": mod, "name": a.name, "alias": local, "line": st.lineno,
                     "guards": guards, "try": in_try, "scope": scope}
                )
                self._bind(local, scope)
            return
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sig = signature(st)
            qual = f"{scope}.{st.name}" if scope else st.name
            if cls is not None and scope == cls["qual"]:
                cls["methods"][st.name] = sig
            elif not scope:
                self.out["defs"][st.name] = sig
                self._bind(st.name, scope)
                if st.name == "__getattr__":
                    self.out["lazy"] = True
            f = _Func()
            self.walk(st.body, [], qual, f, cls, False)
            if f.dicts:
                self.out["funcs"][qual] = f.dicts
            if f.aliases:
                self.out["aliases"][qual] = f.aliases
            if f.lists:
                self.out["lists"][qual] = f.lists
            return
        if isinstance(st, ast.ClassDef):
            qual = f"{scope}.{st.name}" if scope else st.name
            info: Dict[str, Any] = {"qual": qual, "line": st.lineno, "bases": [_src(b) for b in st.bases],
                                    "methods": {}, "attrs": []}
            if not scope:
                self.out["classes"][st.name] = info
                self._bind(st.name, scope)
            self.walk(st.body, guards if not scope else [], qual, None, info, in_try)
            info["attrs"] = sorted(set(info["attrs"]))
            return
        if isinstance(st, ast.If):
            node, neg = st.test, False
            while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                node, neg = node.operand, not neg  # `if not x:` is x, negated
            test = _src(node)
            self._calls(st.test, guards, scope, func)
            self.walk(st.body, guards + [{"src": test, "neg": neg}], scope, func, cls, in_try)
            self.walk(st.orelse, guards + [{"src": test, "neg": not neg}], scope, func, cls, in_try)
            return
        if isinstance(st, ast.Global) and scope:
            self._globals.setdefault(scope, set()).update(st.names)
            return
        if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            catches = False
            for h in st.handlers:  # type: ignore[attr-defined]
                names = [] if h.type is None else [dotted(e) or "" for e in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])]
                if h.type is None or any(n.split(".")[-1] in _IMPORT_ERRORS for n in names):
                    catches = True
            marker = _try_marker(st.body) if catches else None  # type: ignore[attr-defined]
            body_guards = guards + [{"src": marker, "neg": False}] if marker else guards
            self.walk(st.body, body_guards, scope, func, cls, in_try or catches)  # type: ignore[attr-defined]
            for h in st.handlers:  # type: ignore[attr-defined]
                # a handler runs when the body failed: decidable for import failures, else a
                # marker no evaluator can decide
                caught = "" if h.type is None else _src(h.type)
                hg = {"src": marker, "neg": True} if marker else {"src": f"<except {caught}>", "neg": False}
                self.walk(h.body, guards + [hg], scope, func, cls, in_try)
            self.walk(st.orelse, body_guards, scope, func, cls, in_try)  # type: ignore[attr-defined]
            self.walk(st.finalbody, guards, scope, func, cls, in_try)  # type: ignore[attr-defined]
            return
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            self._calls(st.iter if not isinstance(st, ast.While) else st.test, guards, scope, func)
            self.walk(st.body, guards, scope, func, cls, in_try)
            self.walk(st.orelse, guards, scope, func, cls, in_try)
            return
        if isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                self._calls(item.context_expr, guards, scope, func)
            self.walk(st.body, guards, scope, func, cls, in_try)
            return
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self._assign(st, guards, scope, func, cls)
        if isinstance(st, ast.Expr) and func is not None:
            self._update(st.value, guards, func)
        self._calls(st, guards, scope, func)

    def _assign(self, st: Any, guards: List[Guard], scope: str, func: Optional[_Func],
                cls: Optional[Dict[str, Any]]) -> None:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        value = st.value
        for t in targets:
            if isinstance(t, ast.Name):
                if not scope:
                    self._bind(t.id, scope)
                    if value is not None and not isinstance(st, ast.AugAssign):
                        self.out["consts"].setdefault(t.id, []).append(
                            {"src": _src(value), "line": st.lineno, "guards": guards}
                        )
                        if isinstance(value, (ast.Call, ast.Dict)):
                            table = _table(value)
                            if table:
                                self.out["tables"][t.id] = table
                elif cls is not None and scope == cls["qual"]:
                    cls["attrs"].append(t.id)
                elif t.id in self._globals.get(scope, ()) and value is not None:
                    # a function rebinding a module constant: the value may change at run time
                    self.out["consts"].setdefault(t.id, []).append(
                        {"src": _src(value), "line": st.lineno, "guards": [{"src": f"<global write in {scope}>", "neg": False}]}
                    )
                elif func is not None and value is not None:
                    self._dict_assign(t.id, value, guards, func, st.lineno)
                    self._alias(t.id, value, guards, func, st.lineno)
                    literal = isinstance(value, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in value.elts)
                    func.list_op(t.id, "set", len(value.elts) if literal else None, guards, st.lineno)
            elif isinstance(t, ast.Attribute) and cls is not None:
                if isinstance(t.value, ast.Name) and t.value.id == "self":
                    cls["attrs"].append(t.attr)
            elif isinstance(t, ast.Subscript) and func is not None and isinstance(t.value, ast.Name):
                key = t.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    func.key(t.value.id, key.value, guards, st.lineno)
                elif t.value.id in func.dicts:
                    func.opaque(t.value.id)
            elif isinstance(t, (ast.Tuple, ast.List)) and not scope:
                for e in t.elts:
                    if isinstance(e, ast.Name):
                        self._bind(e.id, scope)

    def _dict_assign(self, var: str, value: ast.expr, guards: List[Guard], func: _Func, line: int) -> None:
        def literal(v: ast.expr, g: List[Guard]) -> bool:
            if isinstance(v, ast.Dict):
                for k in v.keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        func.key(var, k.value, g, line)
                    else:
                        func.opaque(var)
                return True
            if isinstance(v, ast.Call) and dotted(v.func) == "dict" and not v.args:
                for kw in v.keywords:
                    if kw.arg is None:
                        func.opaque(var)
                    else:
                        func.key(var, kw.arg, g, line)
                return True
            return False

        if literal(value, guards):
            func.dicts.setdefault(var, {"keys": [], "opaque": False})
            return
        if isinstance(value, ast.IfExp):
            test = _src(value.test)
            a = literal(value.body, guards + [{"src": test, "neg": False}])
            b = literal(value.orelse, guards + [{"src": test, "neg": True}])
            if a and b:
                func.dicts.setdefault(var, {"keys": [], "opaque": False})
                return
        if var in func.dicts:
            func.opaque(var)

    def _alias(self, var: str, value: ast.expr, guards: List[Guard], func: _Func, line: int) -> None:
        """`f = some_function` (or `a if c else b`): calls of `f(...)` may reach the callee."""
        if isinstance(value, ast.IfExp):
            test = _src(value.test)
            self._alias(var, value.body, guards + [{"src": test, "neg": False}], func, line)
            self._alias(var, value.orelse, guards + [{"src": test, "neg": True}], func, line)
            return
        target = dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
        if target and target != var:
            func.aliases.setdefault(var, []).append({"target": target, "guards": list(guards), "line": line})

    def _update(self, value: ast.expr, guards: List[Guard], func: _Func) -> None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("append", "extend"):
            var = dotted(value.func.value)
            if var and "." not in var:
                n: Optional[int] = 1
                if value.func.attr == "extend":
                    arg = value.args[0] if value.args else None
                    n = len(arg.elts) if isinstance(arg, (ast.List, ast.Tuple)) and not any(
                        isinstance(e, ast.Starred) for e in arg.elts) else None
                func.list_op(var, "add", n, guards, value.lineno)
            return
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "update":
            var = dotted(value.func.value)
            if var and "." not in var and var in func.dicts:
                if value.args:
                    func.opaque(var)
                for kw in value.keywords:
                    if kw.arg is None:
                        func.opaque(var)
                    else:
                        func.key(var, kw.arg, guards, value.lineno)

    def _calls(self, node: ast.AST, guards: List[Guard], scope: str, func: Optional[_Func]) -> None:
        for n in ast.walk(node):
            if not isinstance(n, ast.Call):
                continue
            name = dotted(n.func)
            if name is None:
                continue
            self.out["calls"].append(
                {
                    "line": n.lineno,
                    "func": name,
                    "scope": scope,
                    "npos": sum(1 for a in n.args if not isinstance(a, ast.Starred)),
                    "star": any(isinstance(a, ast.Starred) for a in n.args),
                    "starred": [dotted(a.value) for a in n.args if isinstance(a, ast.Starred)],
                    "kw": [k.arg for k in n.keywords if k.arg is not None],
                    "dstar": [dotted(k.value) for k in n.keywords if k.arg is None],
                    "guards": guards,
                }
            )

    def finish(self) -> Dict[str, Any]:
        self.out["names"] = list(self._names)
        # Keep only calls that can reach another module: through an imported name or `self`.
        bound = {i["alias"] for i in self.out["imports"]} | {"self"}
        self.out["aliases"] = {
            q: {v: [a for a in al if a["target"].split(".")[0] in bound] for v, al in table.items()}
            for q, table in self.out["aliases"].items()
        }
        self.out["aliases"] = {q: {v: al for v, al in t.items() if al} for q, t in self.out["aliases"].items()}
        self.out["aliases"] = {q: t for q, t in self.out["aliases"].items() if t}
        local = {(q, v) for q, t in self.out["aliases"].items() for v in t}
        starred = {(c["scope"], v) for c in self.out["calls"] for v in c.get("starred", []) if v}
        self.out["lists"] = {
            q: {v: ops for v, ops in t.items() if (q, v) in starred} for q, t in self.out["lists"].items()
        }
        self.out["lists"] = {q: t for q, t in self.out["lists"].items() if t}
        self.out["calls"] = [
            c for c in self.out["calls"]
            if c["func"].split(".")[0] in bound or (c["scope"], c["func"]) in local
        ]
        return self.out


def _table(value: ast.expr) -> Dict[str, List[str]]:
    """`dict(Cls=Lazy('pkg.mod', 'fn'), ...)` or `{'Cls': fn}`: class name -> [module, function]."""
    pairs: List[Tuple[str, ast.expr]] = []
    if isinstance(value, ast.Call) and dotted(value.func) == "dict":
        pairs = [(k.arg, k.value) for k in value.keywords if k.arg]
    elif isinstance(value, ast.Dict):
        pairs = [(k.value, v) for k, v in zip(value.keys, value.values)
                 if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    out: Dict[str, List[str]] = {}
    for key, v in pairs:
        if isinstance(v, ast.Call) and len(v.args) >= 2 and all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in v.args[:2]
        ):
            out[key] = [v.args[0].value, v.args[1].value]  # type: ignore[attr-defined]
        elif isinstance(v, ast.Name):
            out[key] = ["", v.id]  # a function of the same module (or imported into it)
    return out


def summarize(source: bytes, module: str, is_pkg: bool = False) -> Dict[str, Any]:
    """The summary of one module's source (see the module docstring). Raises SyntaxError."""
    tree = ast.parse(source)
    w = _Walker(module, is_pkg)
    w.walk(tree.body, [], "", None, None, False)
    out = w.finish()
    if b"_LazyModule" in source:
        out["lazy"] = True
    return out


class SummaryCache:
    """Summaries per file content hash, in memory and (when given a folder) on disk."""

    def __init__(self, cache_dir: Optional[Path]) -> None:
        self.dir = cache_dir / "contracts" if cache_dir is not None else None
        self.mem: Dict[Tuple[str, str], Optional[Dict[str, Any]]] = {}
        self.parsed = 0  # files parsed in this run (the rest came from the cache)
        self.touched: set = set()  # every file read, for the result cache's validation

    def get(self, path: str, module: str, is_pkg: bool = False) -> Optional[Dict[str, Any]]:
        """The summary of the file at `path`, or None when it cannot be read or parsed."""
        key = (path, module)
        if key in self.mem:
            return self.mem[key]
        result: Optional[Dict[str, Any]] = None
        self.touched.add(path)
        try:
            raw = Path(path).read_bytes()
        except OSError:
            self.mem[key] = None
            return None
        import hashlib

        digest = hashlib.sha256(raw + f"\0{module}\0{is_pkg}\0{FORMAT}".encode()).hexdigest()
        result = self._load(digest)
        if result is None:
            try:
                result = summarize(raw, module, is_pkg)
            except PARSE_ERRORS:
                result = None
            else:
                self.parsed += 1
                self._store(digest, result)
        self.mem[key] = result
        return result

    def _load(self, digest: str) -> Optional[Dict[str, Any]]:
        if self.dir is None:
            return None
        try:
            data = json.loads((self.dir / f"{digest[:40]}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("format") == FORMAT else None

    def _store(self, digest: str, summary: Dict[str, Any]) -> None:
        if self.dir is None:
            return
        from doctor.cachedir import write_json

        # one small file per parsed source file, named by content digest; pruned (newest 4096
        # kept) once per analysis by doctor.probe.contract_cache.store, not on every write
        write_json(self.dir, f"{digest[:40]}.json", summary)
