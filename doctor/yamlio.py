"""The one YAML reader: safe (no python tags), with the line of every mapping and key, and
errors that name the file and line.

    read_yaml(path, what="file", error=InputError)  -> parsed document (mappings are LineDicts)
    load_yaml(text, name, error=InputError)         -> the same, from text
    line_of(doc, ["rules", 3, "fixes"])             -> the deepest line known on that path

Used by the rule catalogue (rules/*.yaml), workload files and snapshot files, so a user sees
the same kind of message for every YAML they wrote. Callers choose the error class (RuleError
for the catalogue, InputError for user input): both exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Type

from doctor.errors import InputError


class LineDict(Dict[Any, Any]):
    """A mapping that remembers its own line and the line of each key (1-based)."""

    line: int = 0
    key_lines: Dict[str, int]


def _make_loader(error: Type[InputError]) -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    def construct_mapping(loader: Any, node: Any) -> LineDict:
        loader.flatten_mapping(node)
        d = LineDict()
        d.line = node.start_mark.line + 1
        d.key_lines = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise error("mapping keys must be plain scalars", line=key_node.start_mark.line + 1, hint="remove the complex '?' key")
            if key in d:
                raise error(f"duplicate key {key!r}", line=key_node.start_mark.line + 1, hint="each key may appear once in a mapping")
            d[key] = loader.construct_object(value_node, deep=True)
            d.key_lines[str(key)] = key_node.start_mark.line + 1
        return d

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader


_LOADERS: Dict[Type[InputError], type] = {}


def load_yaml(text: str, name: str, *, error: Type[InputError] = InputError, hint: Optional[str] = None) -> Any:
    """Parse YAML text; `name` is the file named in errors."""
    import yaml

    loader = _LOADERS.get(error)
    if loader is None:
        loader = _LOADERS[error] = _make_loader(error)
    from doctor.bounded import parse_document

    try:
        # size, nesting and alias-expansion limits first (doctor/bounded.py), then a safe loader
        return parse_document(text, "yaml", name=name, yaml_loader=loader, error=error, hint=hint)
    except InputError as exc:
        exc.path = name
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc).splitlines()[0]
        raise error(
            f"invalid YAML: {problem}",
            path=name,
            line=mark.line + 1 if mark else None,
            hint=hint or "only plain YAML is accepted (no python tags)",
        ) from None


def read_yaml(path: Path, *, what: str = "file", error: Type[InputError] = InputError) -> Any:
    """Read and parse a YAML (or JSON) file; `what` names it in errors ("workload file")."""
    from doctor.bounded import read_text

    text = read_text(path, what=what, error=error, not_found=f"{what} not found")  # regular files only, bounded
    return load_yaml(text, str(path), error=error)


def line_of(doc: Any, path: Sequence[Any]) -> int:
    """The deepest line known on `path` into a document read here (0 when none is)."""
    line, node = getattr(doc, "line", 0), doc
    for key in path:
        if isinstance(node, LineDict):
            line = node.key_lines.get(str(key), line)
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
            line = getattr(node, "line", line)
        else:
            break
    return line


__all__: List[str] = ["LineDict", "line_of", "load_yaml", "read_yaml"]
