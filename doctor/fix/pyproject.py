"""`fix --pin -o pyproject.toml`: the pins go into `[project].dependencies`, nothing else changes.

The array is edited as text: each string that names a pinned package is replaced by the pin
(its extras and environment marker kept), and packages not listed yet are appended in the
array's own layout. Every byte outside the edited strings stays as it was. The result is then
parsed with tomllib and compared with the original: the dependencies must be exactly the
expected list and the rest of the document must be equal; otherwise nothing is written and the
user is told what to change by hand (WriteError, exit 2).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from doctor.errors import WriteError

_PROJECT = re.compile(r"(?m)^[ \t]*\[[ \t]*project[ \t]*\][ \t]*(?:#[^\r\n]*)?\r?$")
_HEADER = re.compile(r"(?m)^[ \t]*\[")
_DEPS = re.compile(r"(?m)^[ \t]*dependencies[ \t]*=[ \t]*\[")


def _toml() -> Any:
    try:
        import tomllib

        return tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli  # type: ignore[import-not-found]

            return tomli
        except ImportError:
            return None


def is_pyproject(text: Optional[str]) -> bool:
    return text is not None and _PROJECT.search(text) is not None


def _by_hand(pins: Sequence[Any], why: str) -> WriteError:
    wanted = ", ".join(f'"{p.name}=={p.version}"' for p in pins)
    return WriteError(
        f"cannot pin in this pyproject.toml: {why}; not touched",
        hint=f"put {wanted} into [project].dependencies by hand, or write a constraints file "
        "(`--pin --constraints -o constraints.txt`, then `pip install -c constraints.txt .`)",
    )


def _scan_array(text: str, start: int) -> Tuple[int, List[Tuple[int, int, str]]]:
    """From the '[' at `start`: the index of its closing ']' and the string elements as
    (start, end, quote) spans, quotes included. Raises ValueError on what it does not handle."""
    i = start + 1
    depth = 1
    elements: List[Tuple[int, int, str]] = []
    while i < len(text):
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        if ch in "\"'":
            if text.startswith(ch * 3, i):
                raise ValueError("multi-line strings")
            j = i + 1
            while j < len(text) and text[j] != ch:
                if text[j] == "\n":
                    raise ValueError("unterminated string")
                if ch == '"' and text[j] == "\\":
                    raise ValueError("escapes in a dependency string")
                j += 1
            if j >= len(text):
                raise ValueError("unterminated string")
            if depth == 1:
                elements.append((i, j + 1, ch))
            i = j + 1
            continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i, elements
        i += 1
    raise ValueError("unterminated array")


def _pinned(value: str, pin: Any) -> Tuple[str, Optional[str]]:
    from packaging.requirements import Requirement

    req = Requirement(value)
    text = req.name + ("[" + ",".join(sorted(req.extras)) + "]" if req.extras else "") + f"=={pin.version}"
    if req.marker is not None:
        text += f" ; {req.marker}"
    warning = f"{req.name} was required from {req.url}: replaced by a pin to {pin.version}" if req.url else None
    return text, warning


def render_pyproject(old: str, pins: Sequence[Any]) -> Tuple[str, List[str]]:
    """The new pyproject.toml text and warnings; WriteError when it cannot be done safely."""
    from packaging.requirements import InvalidRequirement, Requirement

    from doctor.versions import canonical_name as normalize_dist

    toml = _toml()
    if toml is None:
        raise _by_hand(pins, "editing it needs Python 3.11 (tomllib) or the tomli package")
    try:
        before = toml.loads(old)
    except Exception as exc:  # noqa: BLE001 - tomllib.TOMLDecodeError
        raise _by_hand(pins, f"it is not valid TOML ({exc})") from None
    project = before.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("dependencies"), list):
        dynamic = isinstance(project, dict) and "dependencies" in (project.get("dynamic") or [])
        raise _by_hand(pins, "its dependencies are dynamic" if dynamic else "it has no [project].dependencies list")
    head = _PROJECT.search(old)
    assert head is not None
    nxt = _HEADER.search(old, head.end())
    table_end = nxt.start() if nxt else len(old)
    m = _DEPS.search(old, head.end(), table_end)
    if m is None:
        raise _by_hand(pins, "[project].dependencies is not written as `dependencies = [...]` in the [project] table")
    try:
        close, elements = _scan_array(old, m.end() - 1)
    except ValueError as exc:
        raise _by_hand(pins, f"its dependencies array uses {exc}") from None

    wanted: Dict[str, Any] = {p.name: p for p in pins}
    warnings: List[str] = []
    edits: List[Tuple[int, int, str]] = []
    expected: List[str] = []
    seen = set()
    for start, end, quote in elements:
        value = old[start + 1 : end - 1]
        try:
            name = normalize_dist(Requirement(value).name)
        except InvalidRequirement:
            expected.append(value)
            continue
        pin = wanted.get(name)
        if pin is None:
            expected.append(value)
            continue
        new_value, warning = _pinned(value, pin)
        if warning:
            warnings.append(warning)
        seen.add(name)
        expected.append(new_value)
        if new_value != value:
            q = quote if quote not in new_value else ("'" if quote == '"' else '"')
            edits.append((start, end, f"{q}{new_value}{q}"))
    added = [f"{p.name}=={p.version}" for p in pins if p.name not in seen]
    expected.extend(added)
    if added:
        edits.append(_append(old, m.end() - 1, close, elements, added))
    new = old
    for start, end, text in sorted(edits, reverse=True):
        new = new[:start] + text + new[end:]
    try:
        after = toml.loads(new)
    except Exception as exc:  # noqa: BLE001
        raise _by_hand(pins, f"the edit would not parse ({exc})") from None
    got = after.get("project", {}).get("dependencies")
    after["project"].pop("dependencies", None)
    before["project"].pop("dependencies", None)
    if got != expected or after != before:
        raise _by_hand(pins, "the edit would change more than the dependencies")
    return new, warnings


def _append(old: str, open_at: int, close: int, elements: List[Tuple[int, int, str]], added: List[str]) -> Tuple[int, int, str]:
    """An edit (start, end, text) that adds `added` at the end of the array, in its layout."""
    quote = elements[-1][2] if elements else '"'
    items = [f"{quote}{a}{quote}" for a in added]
    last_end = elements[-1][1] if elements else open_at + 1
    between = old[last_end:close]
    code_between = re.sub(r"#[^\n]*", "", between)
    has_comma = "," in code_between
    multiline = "\n" in old[open_at:close]
    line_start = old.rfind("\n", 0, close) + 1
    close_alone = old[line_start:close].strip() == ""
    if multiline and close_alone:
        nl = "\r\n" if old[line_start - 2 : line_start] == "\r\n" else "\n"
        if elements:
            el_line = old.rfind("\n", 0, elements[-1][0]) + 1
            indent = old[el_line : elements[-1][0]]
            indent = indent if indent.strip() == "" else "    "
        else:
            indent = "    "
        lines = "".join(f"{indent}{item},{nl}" for item in items)
        if elements and not has_comma:
            # the last element has no trailing comma: add one right after it, then the new lines
            return (last_end, line_start, "," + old[last_end:line_start] + lines)
        return (line_start, line_start, lines)
    lead = "" if not elements else (" " if has_comma else ", ")
    return (close, close, lead + ", ".join(items))
