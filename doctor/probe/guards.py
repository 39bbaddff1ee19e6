"""Evaluate the version guards a caller writes around its calls, from its own source.

Callers pass keyword arguments only to callee versions that take them:

    _flash_attn_version = PkgVersion(get_pkg_version("flash-attn"))
    _flash_attn_2_5_7_plus = _flash_attn_version >= PkgVersion("2.5.7")
    ...
    if _flash_attn_2_5_7_plus:
        fa_optional_forward_kwargs["block_table"] = None

`Evaluator.test(src)` answers such a test with the installed versions: True, False, or None
(undecided: a runtime value, an unknown helper, a constant assigned in more than one place).
It understands module constants, `importlib.metadata.version("dist")` under any alias,
`packaging.version.Version/parse`, `pkg.__version__`, comparisons, `and`/`or`/`not`,
`"name" in inspect.signature(f).parameters`, and helper functions the pair's YAML declares
(`is_flash_attn_greater_or_equal("2.4.1")`). Nothing is executed.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Set

from packaging.version import InvalidVersion, Version

_UNDECIDED = object()
_VERSION_OF = {"importlib.metadata.version", "importlib_metadata.version", "pkg_resources.get_distribution"}
_PARSE = {"packaging.version.Version", "packaging.version.parse", "pkg_resources.parse_version",
          "distutils.version.LooseVersion", "version.parse", "version.Version"}
_CMP: Dict[type, Callable[[Any, Any], bool]] = {
    ast.GtE: operator.ge, ast.Gt: operator.gt, ast.LtE: operator.le, ast.Lt: operator.lt,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}


def _version(text: Any) -> Any:
    if isinstance(text, Version):
        return text
    if isinstance(text, str):
        try:
            return Version(text)
        except InvalidVersion:
            return _UNDECIDED
    return _UNDECIDED


class Evaluator:
    """Guards of one caller module.

    imports:  local name -> dotted target ("importlib.metadata.version", "flash_attn")
    consts:   module constant -> [assignments {"src", "guards"}]
    versions: distribution (PEP 503 name) -> installed version
    modules:  top-level module -> its distribution ("flash_attn" -> "flash-attn")
    accepts:  dotted callee symbol -> set of parameter names, or None when unknown
    helpers:  function name -> {"dist", "op", "version" (fixed) or none (first argument)}
    """

    def __init__(
        self,
        imports: Mapping[str, str],
        consts: Mapping[str, Sequence[Mapping[str, Any]]],
        versions: Mapping[str, str],
        modules: Mapping[str, str],
        accepts: Callable[[str], Optional[Set[str]]],
        helpers: Mapping[str, Mapping[str, str]],
        assume: Sequence[str] = (),
        module_present: Optional[Callable[[str], bool]] = None,
    ) -> None:
        self.imports = imports
        self.consts = consts
        self.versions = versions
        self.modules = modules
        self.accepts = accepts
        self.helpers = helpers
        self.module_present = module_present
        self.assume = frozenset(assume)  # tests known to hold on the path analysed (the callee's import guards)
        self._memo: Dict[str, Any] = {}
        self._path: Mapping[str, bool] = {}  # tests known on the path being analysed (src -> value)
        self._const_depth = 0
        self._busy: Set[str] = set()

    def without_assumptions(self) -> "Evaluator":
        return Evaluator(self.imports, self.consts, self.versions, self.modules, self.accepts, self.helpers,
                         (), self.module_present)

    # ------------------------------------------------------------------ public
    def test(self, src: str, path: Optional[Mapping[str, bool]] = None) -> Optional[bool]:
        """A guard's truth with the installed versions; None when it cannot be decided.

        `path`: tests whose value is known where the code runs (the `if`s around the call)."""
        if path and src in path:
            return path[src]
        if src.startswith("<try: "):
            return self._try_runs(src)
        try:
            node = ast.parse(src, mode="eval").body
        except SyntaxError:
            return None
        self._path = path or {}
        try:
            v = self._eval(node)
        finally:
            self._path = {}
        return None if v is _UNDECIDED else bool(v)

    def all_true(self, guards: Sequence[Mapping[str, Any]], path: Optional[Mapping[str, bool]] = None) -> Optional[bool]:
        """The conjunction of a guard chain ({"src", "neg"}): False wins over undecided."""
        result: Optional[bool] = True
        for g in guards:
            # the callee-import assumption applies to module constants only (TE 2.x computes its
            # version flags under `if _flash_attn_is_installed:`), never to a site's own tests
            t = True if self._const_depth and str(g["src"]) in self.assume else self.test(str(g["src"]), path)
            if t is not None and g.get("neg"):
                t = not t
            if t is False:
                return False
            if t is None:
                result = None
        return result

    def _try_runs(self, marker: str) -> Optional[bool]:
        """Does a try body that imports these modules and reads these versions run through?"""
        from doctor.probe.packages import normalize

        body = marker[len("<try: "):-1]
        fields = dict(part.strip().split("=", 1) for part in body.split(";") if "=" in part)
        mods = [m for m in fields.get("modules", "").split(",") if m]
        dists = [d for d in fields.get("dists", "").split(",") if d]
        if any(normalize(d) not in self.versions for d in dists):
            return False
        if mods and self.module_present is None:
            return None
        if any(not self.module_present(m) for m in mods):  # type: ignore[misc]
            return False
        return True  # imports can still fail for other reasons; the installed path is analysed

    # ------------------------------------------------------------------ evaluation
    def _resolve(self, name: str) -> str:
        head, _, rest = name.partition(".")
        target = self.imports.get(head)
        if target is None:
            return name
        return f"{target}.{rest}" if rest else target

    def _const(self, name: str) -> Any:
        if name in self._memo:
            return self._memo[name]
        if name in self._busy or name not in self.consts:
            return _UNDECIDED
        self._busy.add(name)
        saved, self._path = self._path, {}  # path facts are about the function, not the module
        self._const_depth += 1
        # Module code runs top to bottom: an assignment that certainly runs replaces what came
        # before; one that may run leaves the value undecided unless both agree.
        out: Any = _UNDECIDED
        for a in sorted(self.consts[name], key=lambda a: int(a.get("line", 0))):
            runs = self.all_true(a.get("guards") or [])
            if runs is False:
                continue  # assigned only on a branch not taken with these versions
            try:
                value = self._eval(ast.parse(str(a["src"]), mode="eval").body)
            except SyntaxError:
                value = _UNDECIDED
            if runs is True:
                out = value
            elif out is _UNDECIDED or value is _UNDECIDED or value != out:
                out = _UNDECIDED  # may or may not be replaced, by a different value
        self._busy.discard(name)
        self._const_depth -= 1
        self._path = saved
        self._memo[name] = out
        return out

    def _dist_version(self, dist: str) -> Any:
        from doctor.probe.packages import normalize

        v = self.versions.get(normalize(dist))
        return _version(v) if v else _UNDECIDED

    def _eval(self, node: ast.AST) -> Any:  # noqa: C901 - one small interpreter
        if isinstance(node, ast.Constant):
            return node.value
        if self._path:
            known = self._path.get(ast.unparse(node))
            if known is not None:
                return known
        if isinstance(node, ast.Name):
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            return self._const(node.id)
        if isinstance(node, ast.Attribute):
            if node.attr == "__version__":
                from doctor.probe.pysource import dotted

                mod = dotted(node.value)
                if mod:
                    dist = self.modules.get(self._resolve(mod).split(".")[0])
                    if dist:
                        return self._dist_version(dist)
            if node.attr == "version" and isinstance(node.value, ast.Call):  # get_distribution(x).version
                return self._eval(node.value)
            return _UNDECIDED
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self._eval(node.operand)
            return _UNDECIDED if v is _UNDECIDED else (not v)
        if isinstance(node, ast.BoolOp):
            vals = [self._eval(v) for v in node.values]
            if isinstance(node.op, ast.And):
                if any(v is not _UNDECIDED and not v for v in vals):
                    return False
                return _UNDECIDED if any(v is _UNDECIDED for v in vals) else True
            if any(v is not _UNDECIDED and v for v in vals):
                return True
            return _UNDECIDED if any(v is _UNDECIDED for v in vals) else False
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        return _UNDECIDED

    def _compare(self, node: ast.Compare) -> Any:
        left = self._eval(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                params = self._parameters(right_node)
                if params is None or not isinstance(left, str):
                    return _UNDECIDED
                ok = left in params
                ok = ok if isinstance(op, ast.In) else not ok
            else:
                right = self._eval(right_node)
                if left is _UNDECIDED or right is _UNDECIDED or type(op) not in _CMP:
                    return _UNDECIDED
                if isinstance(left, Version) or isinstance(right, Version):
                    left, right = _version(left), _version(right)
                    if left is _UNDECIDED or right is _UNDECIDED:
                        return _UNDECIDED
                try:
                    ok = _CMP[type(op)](left, right)
                except TypeError:
                    return _UNDECIDED
            if not ok:
                return False
            left = right if not isinstance(op, (ast.In, ast.NotIn)) else left
        return True

    def _parameters(self, node: ast.AST) -> Optional[Set[str]]:
        """`inspect.signature(f).parameters` (optionally wrapped in list()/set()) of a callee symbol."""
        from doctor.probe.pysource import dotted

        if isinstance(node, ast.Call) and dotted(node.func) in ("list", "set", "tuple") and node.args:
            node = node.args[0]
        if isinstance(node, ast.Attribute) and node.attr == "parameters" and isinstance(node.value, ast.Call):
            call = node.value
            if self._resolve(dotted(call.func) or "") in ("inspect.signature", "signature") and call.args:
                target = dotted(call.args[0])
                if target:
                    return self.accepts(self._resolve(target))
        return None

    def _call(self, node: ast.Call) -> Any:
        from doctor.probe.pysource import dotted

        name = dotted(node.func)
        if name is None:
            return _UNDECIDED
        full = self._resolve(name)
        short = name.split(".")[-1]
        if short in self.helpers and self.helpers[short].get("op") == "range":
            h = self.helpers[short]  # helper(min_version=None, max_version=None): min <= v <= max
            have = self._dist_version(h["dist"])
            args = {k.arg: k.value for k in node.keywords if k.arg}
            bounds = [args.get("min_version", node.args[0] if node.args else None),
                      args.get("max_version", node.args[1] if len(node.args) > 1 else None)]
            if have is _UNDECIDED:
                return _UNDECIDED
            ok = True
            for bound, cmp in zip(bounds, (operator.ge, operator.le)):
                if bound is None:
                    continue
                b = self._eval(bound)
                if b is None:
                    continue
                b = _version(b)
                if b is _UNDECIDED:
                    return _UNDECIDED
                ok = ok and cmp(have, b)
            return ok
        if short in self.helpers:
            h = self.helpers[short]
            want: Any = h.get("version")
            if want is None and node.args:
                want = self._eval(node.args[0])
            have = self._dist_version(h["dist"])
            want = _version(want)
            if have is _UNDECIDED or want is _UNDECIDED:
                return _UNDECIDED
            op = {">=": operator.ge, ">": operator.gt, "<": operator.lt, "<=": operator.le}[h.get("op", ">=")]
            return op(have, want)
        if full in _VERSION_OF and node.args:
            dist = self._eval(node.args[0])
            return self._dist_version(dist) if isinstance(dist, str) else _UNDECIDED
        if (full in _PARSE or full.endswith(("packaging.version.Version", "packaging.version.parse"))) and node.args:
            return _version(self._eval(node.args[0]))
        return _UNDECIDED
