"""Bounded reading of every user-supplied JSON/YAML input (snapshots, workloads, model configs,
rule files, release catalogues).

The limits live in one place: `parse_document` (used by doctor.yamlio for every YAML file and
by the JSON readers) and `read_text` (every input file). `load_document` is both together. It never blocks and never lets a small file grow into a
large one in memory:

- only regular files are read (a FIFO, /dev/zero, a socket or a directory is refused at once:
  the file is opened non-blocking and checked with fstat before any read);
- at most MAX_BYTES are read;
- YAML is scanned as a stream of events first (no object is built): nesting deeper than
  MAX_DEPTH or aliases that would expand the document past MAX_EXPANDED nodes are refused;
- JSON nesting deeper than MAX_DEPTH is refused (the decoder's own recursion limit included).

Every refusal is the caller's error class (InputError, exit 2, by default) with one line that
names the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple, Type, Union

from doctor.errors import InputError

MAX_BYTES = 128 * 1024 * 1024  # the largest snapshot seen (2M packages) is 50 MB
MAX_DEPTH = 100  # the deepest shipped rule condition is about 12 levels
MAX_EXPANDED = 1_000_000  # nodes that aliases may add on top of the ones written in the file

JsonParse = Callable[[str], Any]


class _Limit(Exception):
    def __init__(self, message: str, line: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def read_text(
    path: Union[str, Path],
    *,
    what: str = "file",
    error: Type[InputError] = InputError,
    hint: Optional[str] = None,
    max_bytes: int = MAX_BYTES,
    not_found: Optional[str] = None,
) -> str:
    """The UTF-8 text of a regular file (a BOM is dropped), read without ever blocking."""
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(not_found or f"no such {what}", path=name, hint=hint) from None
    except IsADirectoryError:
        raise error(f"is a directory, not a {what}", path=name) from None
    except PermissionError:
        raise error(f"cannot read the {what}: permission denied", path=name) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", path=name) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"is a directory, not a {what}", path=name)
        if not stat.S_ISREG(st.st_mode):
            raise error(
                f"not a regular file (a pipe, device or socket), so not read as a {what}",
                path=name,
                hint="save the content to a file and pass that",
            )
        if st.st_size > max_bytes:
            raise error(f"{what} too large ({st.st_size} bytes; the limit is {max_bytes})", path=name)
        os.set_blocking(fd, True)
        chunks: List[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(f"{what} too large (over {max_bytes} bytes)", path=name)
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", path=name) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"not UTF-8 text (is this a {what}?)", path=name, line=line, hint=hint) from None


def _line(event: Any) -> Optional[int]:
    mark = getattr(event, "start_mark", None)
    return None if mark is None else int(mark.line) + 1


def _events(yaml: Any, text: str, loader: Any) -> Iterator[Any]:
    """The parser's events; libyaml's own nesting limit (PyYAML >= 6.0.4 raises "exceeded maximum
    nesting depth" from its scanner, which reads ahead of the events) is the same refusal as ours."""
    try:
        yield from yaml.parse(text, Loader=loader)
    except yaml.YAMLError as exc:
        if "nesting depth" not in str(exc):
            raise
        mark = getattr(exc, "problem_mark", None)
        raise _Limit(f"nested more than {MAX_DEPTH} levels deep", None if mark is None else int(mark.line) + 1) from None


def _check_yaml_events(text: str) -> None:
    """Walk the YAML event stream (nothing is constructed): depth and alias expansion."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    frames: List[List[Any]] = []  # [anchor, expanded node count]
    sizes: dict = {}
    written = 0
    expanded = 0
    for ev in _events(yaml, text, loader):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            written += 1
            frames.append([ev.anchor, 1])
            if len(frames) > MAX_DEPTH:
                raise _Limit(f"nested more than {MAX_DEPTH} levels deep", _line(ev))
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = frames.pop()
            if anchor is not None:
                sizes[anchor] = n
        elif isinstance(ev, yaml.ScalarEvent):
            written += 1
            n = 1
            if ev.anchor is not None:
                sizes[ev.anchor] = 1
        elif isinstance(ev, yaml.AliasEvent):
            n = sizes.get(ev.anchor, 1)
            expanded += n
            if expanded > MAX_EXPANDED + written:
                raise _Limit(
                    f"aliases expand to more than {MAX_EXPANDED} nodes (a YAML alias bomb?)", _line(ev)
                )
        else:
            continue
        if frames:
            frames[-1][1] += n


def _check_depth(doc: Any) -> None:
    """Refuse containers nested more than MAX_DEPTH levels (iterative: no recursion)."""
    stack: List[Tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children: List[Any]
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_DEPTH:
                    raise _Limit(f"nested more than {MAX_DEPTH} levels deep")
                stack.append((child, depth + 1))


def parse_document(
    text: str,
    fmt: str,
    *,
    name: str = "<input>",
    yaml_loader: Optional[type] = None,
    error: Type[InputError] = InputError,
    hint: Optional[str] = None,
) -> Any:
    """Parse `text` as "json" or "yaml" within the limits. Syntax errors propagate unchanged
    (json.JSONDecodeError / yaml.YAMLError) for the caller to word; a limit is `error`."""
    try:
        if fmt == "json":
            try:
                doc = json.loads(text)
            except RecursionError:
                raise _Limit(f"nested more than {MAX_DEPTH} levels deep") from None
            _check_depth(doc)
            return doc
        import yaml

        _check_yaml_events(text)
        try:
            loader: Any = yaml_loader or getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (subclass)
        except RecursionError:
            raise _Limit(f"nested more than {MAX_DEPTH} levels deep") from None
    except _Limit as exc:
        raise error(exc.message, path=name, line=exc.line, hint=hint) from None


def load_document(
    path: Union[str, Path],
    fmt: str,
    *,
    what: str = "file",
    yaml_loader: Optional[type] = None,
    error: Type[InputError] = InputError,
    hint: Optional[str] = None,
) -> Tuple[Any, str]:
    """Read and parse one input file within the limits: (document, text)."""
    text = read_text(path, what=what, error=error, hint=hint)
    return parse_document(text, fmt, name=str(path), yaml_loader=yaml_loader, error=error, hint=hint), text
