"""Write a plan's pins into a requirements (or constraints) file: the only place that touches
the user's files.

    render_pinfile()   pure: old text + pins -> new text and warnings
    write_pinfile()    reads, renders, writes atomically (temp file + rename) with a backup of
                       the old file (FILE.bak, or FILE.bak.N: an older backup is never
                       overwritten); a read-only file is refused; a file with hard links is
                       rewritten in place (after the backup) so every name sees the pins;
                       --dry-run returns the diff instead

What an update keeps and changes:

* comments, blank lines, options (`-r`, `-c`, `--index-url` ...), URLs and unrelated
  requirements stay byte for byte, line endings (LF or CRLF) included;
* every line for a pinned package is replaced in place, keeping its extras (not in a
  constraints file: pip refuses extras there) and its environment marker; its `--hash` options
  are dropped (they hash the old version) with a warning to regenerate them;
* each line it manages ends with `# attn-doctor: RULE-ID, ...`; pins for packages the file does
  not mention are appended under one `# attn-doctor fix` header;
* running it twice changes nothing the second time;
* a package also pinned in a file pulled in with `-r`/`-c` is reported (pip would see two pins).
"""

from __future__ import annotations

import difflib
import glob
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set, Tuple

from packaging.requirements import InvalidRequirement, Requirement

from doctor.errors import WriteError
from doctor.model import Pin

if TYPE_CHECKING:
    from doctor.fix.plan import FixPlan
from doctor.versions import canonical_name

MARK = "attn-doctor:"
HEADER = "# attn-doctor fix: pins for the attention stack (each line names the findings it fixes)"
_INCLUDE = re.compile(r"^\s*(-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)")
_COMMENT = re.compile(r"(^|\s)#")
_EDITABLE = re.compile(r"^\s*(?:-e|--editable)(?:\s+|=)(\S+)")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?")


@dataclass(frozen=True)
class Pinned:
    """A pin to write, with the findings it fixes (named in the line's marker)."""

    pin: Pin
    rule_ids: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.pin.name

    @property
    def version(self) -> str:
        return self.pin.version


@dataclass(frozen=True)
class PinResult:
    path: Path
    text: str  # the new contents
    diff: str  # unified diff old -> new ("" when unchanged)
    changed: bool
    written: bool
    backup: Optional[Path] = None
    warnings: Tuple[str, ...] = ()


def pins_from_plan(plan: "FixPlan") -> List[Pinned]:
    """The plan's pins, each with the rule ids of the changes that pin its package."""
    rule_ids: Dict[str, Tuple[str, ...]] = {}
    for change in plan.changes:
        for p in change.pins:
            ids = rule_ids.get(p.name, ()) + ((change.rule_id,) if change.rule_id else ())
            rule_ids[p.name] = tuple(dict.fromkeys(ids))
    out = [Pinned(pin, rule_ids.get(pin.name, ())) for pin in plan.pins]
    # what the pins pull in (TE's core and torch extension at the same version), as resolved
    res = plan.resolution
    if res is not None:
        have = {p.name for p in plan.pins}
        for name in res.pulled:
            if name not in have and name in res.versions:
                parent = next((p.name for p in plan.pins if name.startswith(p.name)), "")
                out.append(Pinned(Pin(name, res.versions[name]), rule_ids.get(parent, ())))
    return out


# --------------------------------------------------------------------------- parsing


def _logical_lines(text: str) -> List[List[str]]:
    """Physical lines (with their endings) grouped into logical lines (`\\` continuations)."""
    groups: List[List[str]] = []
    current: List[str] = []
    for line in text.splitlines(keepends=True):
        current.append(line)
        if not line.rstrip("\r\n").endswith("\\"):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def _editable(group: Sequence[str]) -> Optional[Tuple[str, Set[str], str]]:
    """(package name, extras, target) of an `-e VCS-URL#egg=NAME` line; None for anything else
    (a local `-e ./path` names no package in the line itself)."""
    m = _EDITABLE.match(group[0])
    egg = _EGG.search(m.group(1)) if m else None
    if m is None or egg is None:
        return None
    extras = {e.strip() for e in (egg.group(2) or "").split(",") if e.strip()}
    return egg.group(1), extras, m.group(1)


def _split_comment(body: str) -> Tuple[str, str]:
    m = _COMMENT.search(body)
    if not m:
        return body, ""
    at = m.start() + len(m.group(1))
    return body[:at].rstrip(), body[at + 1 :].strip()


def _parse(group: Sequence[str]) -> Optional[Tuple[Requirement, bool, str]]:
    """(requirement, had hashes, user comment) for a requirement line; None for anything else."""
    joined = " ".join(line.rstrip("\r\n").rstrip("\\").strip() for line in group).strip()
    if not joined or joined.startswith("#") or joined.startswith("-"):
        return None
    body, comment = _split_comment(joined)
    spec, _, options = body.partition(" --")
    spec = spec.strip()
    if not spec or "://" in spec.split("@")[0] or spec.startswith((".", "/")):
        return None
    try:
        req = Requirement(spec)
    except InvalidRequirement:
        return None
    had_hashes = "hash" in options or "--hash" in body
    if comment.startswith(MARK):
        _, _, rest = comment.partition(";")
        comment = rest.strip()
    return req, had_hashes, comment


def _line(req_name: str, extras: Set[str], pin: Pinned, marker: Optional[str], comment: str, constraints: bool) -> str:
    name = req_name
    if extras and not constraints:
        name += "[" + ",".join(sorted(extras)) + "]"
    text = f"{name}=={pin.version}"
    if marker:
        text += f" ; {marker}"
    mark = f"# {MARK} {', '.join(pin.rule_ids)}" if pin.rule_ids else f"# {MARK} fix"
    if comment:
        mark += f"; {comment}"
    return f"{text}  {mark}"


# --------------------------------------------------------------------------- rendering


def render_pinfile(
    old: Optional[str],
    pins: Sequence[Pinned],
    *,
    constraints: bool = False,
    base_dir: Optional[Path] = None,
    read: Callable[[Path], Optional[str]] = lambda p: p.read_text(encoding="utf-8") if p.is_file() else None,
) -> Tuple[str, List[str]]:
    """The new file contents and the warnings to show. Pure apart from reading `-r` files."""
    old = old or ""
    nl = "\r\n" if "\r\n" in old else "\n"
    wanted: Dict[str, Pinned] = {p.name: p for p in pins}
    warnings: List[str] = []
    out: List[str] = []
    seen: Set[str] = set()
    includes: List[str] = []
    for group in _logical_lines(old):
        first = group[0]
        m = _INCLUDE.match(first)
        if m:
            includes.append(m.group(2))
        editable = _editable(group)
        if editable is not None and canonical_name(editable[0]) in wanted:
            name, extras, target = editable
            replaced = wanted[canonical_name(name)]
            seen.add(replaced.name)
            warnings.append(
                f"{name} was an editable install (-e {target}): replaced by a pin to {replaced.version}; "
                "the old line is in the backup"
            )
            ending = group[-1][len(group[-1].rstrip("\r\n")) :] or nl
            out.append(_line(name, extras | set(replaced.pin.extras), replaced, None, "", constraints) + ending)
            continue
        parsed = _parse(group)
        if parsed is None:
            out.extend(group)
            continue
        req, had_hashes, comment = parsed
        name = canonical_name(req.name)
        pin = wanted.get(name)
        if pin is None:
            out.extend(group)
            continue
        seen.add(name)
        if req.url:
            warnings.append(f"{req.name} was installed from {req.url}: replaced by a pin to {pin.version}")
        if had_hashes:
            warnings.append(
                f"{req.name}: the old --hash options were for another version and were dropped; "
                "regenerate hashes (pip-compile --generate-hashes, or pip hash) before installing with --require-hashes"
            )
        if req.extras and constraints:
            warnings.append(f"{req.name}: extras [{','.join(sorted(req.extras))}] dropped (pip does not accept extras in a constraints file)")
        ending = group[-1][len(group[-1].rstrip("\r\n")) :] or nl
        out.append(_line(req.name, set(req.extras) | set(pin.pin.extras), pin, str(req.marker) if req.marker else None, comment, constraints) + ending)
    missing = [p for p in pins if p.name not in seen]
    if missing:
        text = "".join(out)
        if text and not text.endswith(("\n", "\r")):
            out.append(nl)
        if HEADER not in text:
            if text.strip():
                out.append(nl)
            out.append(HEADER + nl)
        for pin in missing:
            out.append(_line(pin.name, set(pin.pin.extras), pin, None, "", constraints) + nl)
    if base_dir is not None:
        warnings.extend(_included_pins(includes, wanted, base_dir, read, set()))
    return "".join(out), warnings


def _included_pins(includes: Sequence[str], wanted: Dict[str, Pinned], base: Path, read: Callable[[Path], Optional[str]], visited: Set[Path]) -> List[str]:
    out: List[str] = []
    for inc in includes:
        path = (base / inc).resolve()
        if path in visited:
            continue
        visited.add(path)
        try:
            text = read(path)
        except OSError:
            text = None
        if text is None:
            continue
        nested: List[str] = []
        for no, group in enumerate(_logical_lines(text), 1):
            m = _INCLUDE.match(group[0])
            if m:
                nested.append(m.group(2))
            parsed = _parse(group)
            if parsed and canonical_name(parsed[0].name) in wanted:
                pin = wanted[canonical_name(parsed[0].name)]
                out.append(
                    f"{parsed[0].name} is also required in {inc} ({str(parsed[0]).strip()}): change it there to "
                    f"=={pin.version}, or pip will see two requirements for it"
                )
        out.extend(_included_pins(nested, wanted, path.parent, read, visited))
    return out


# --------------------------------------------------------------------------- writing


def _read_existing(path: Path) -> Optional[str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise WriteError(f"cannot write {path}: {path.parent} is not a directory") from None
    except IsADirectoryError:
        raise WriteError(f"cannot write {path}: it is a directory") from None
    except OSError as exc:
        raise WriteError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WriteError(f"{path} is not UTF-8 text; not touched") from None


NOT_REQUIREMENTS = (".toml", ".cfg", ".py", ".lock", ".json", ".yaml", ".yml", ".ini")
_TABLE = re.compile(r"^\s*\[{1,2}[A-Za-z0-9_.\"' -]+\]{1,2}\s*(#.*)?$")
STALE_TMP_S = 60.0  # a leftover temporary file older than this is from a killed earlier run


def _refuse_other_formats(path: Path, old: Optional[str], pins: Sequence["Pinned"]) -> None:
    """--pin writes pip requirement lines: refuse files that are not requirements files
    (pyproject.toml, setup.cfg, Pipfile, lock files), which those lines would corrupt."""
    toml_like = old is not None and any(_TABLE.match(line) for line in old.splitlines())
    if path.suffix.lower() in NOT_REQUIREMENTS or path.name in ("Pipfile", "setup.py") or toml_like:
        wanted = " ".join(f'"{p.name}=={p.version}"' for p in pins)
        raise WriteError(
            f"{path} is not a requirements file: --pin writes pip requirement lines, which would corrupt it; not touched",
            hint=f"write a constraints file (`--pin --constraints -o constraints.txt`, then `pip install -c constraints.txt .`)"
            f" or change the project's dependencies by hand to {wanted}",
        )


def _remove_stale_tmp(parent: Path, name: str) -> None:
    """Remove hidden temporary files a killed earlier write of `name` left behind."""
    import time

    now = time.time()
    for leftover in parent.glob(f".{glob.escape(name)}.*.tmp"):
        try:
            if leftover.is_file() and not leftover.is_symlink() and now - leftover.stat().st_mtime > STALE_TMP_S:
                leftover.unlink()
        except OSError:
            pass


def _backup(path: Path) -> Path:
    """Copy `path` to FILE.bak, or FILE.bak.1, .2, ... when that exists: an older backup is
    never overwritten."""
    for n in range(0, 1000):
        candidate = path.with_name(path.name + ".bak" + (f".{n}" if n else ""))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except IsADirectoryError:
            continue
        with os.fdopen(fd, "wb") as fh:
            fh.write(path.read_bytes())
        shutil.copystat(path, candidate)
        return candidate
    raise OSError(f"no free backup name next to {path} (FILE.bak to FILE.bak.999 exist)")


def write_pinfile(path: Path, pins: Sequence[Pinned], *, constraints: bool = False, dry_run: bool = False) -> PinResult:
    """Update (or create) `path` with `pins`. The old file is intact whenever this raises.

    A symlink is followed (its target is updated, the link stays); anything that exists and is
    not a regular file (a device such as /dev/null, a FIFO, a directory) is refused."""
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise WriteError(f"cannot write {path}: not a regular file", hint="pass a requirements file path with -o")
    old = _read_existing(path)
    from doctor.fix.pyproject import is_pyproject, render_pyproject

    if path.suffix.lower() == ".toml" and old is not None and is_pyproject(old):
        if constraints:
            raise WriteError(
                f"{path}: constraints go in a file of their own, not into pyproject.toml; not touched",
                hint="`--pin --constraints -o constraints.txt`, then `pip install -c constraints.txt .`",
            )
        new, warnings = render_pyproject(old, pins)
    else:
        _refuse_other_formats(path, old, pins)
        new, warnings = render_pinfile(old, pins, constraints=constraints, base_dir=path.parent)
    diff = "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=str(path) if old is not None else "/dev/null",
            tofile=str(path),
        )
    )
    changed = new != (old or "")
    if dry_run or not changed:
        return PinResult(path, new, diff, changed, written=False, warnings=tuple(warnings))
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise WriteError(f"cannot write {path}: {parent} is not a directory", hint="the old file, if any, is unchanged")
    _remove_stale_tmp(parent, path.name)
    links = 1
    if old is not None:
        st = path.stat()
        if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
            raise WriteError(
                f"{path} is read-only (mode {stat.filemode(st.st_mode)}); not touched",
                hint=f"make it writable (chmod u+w {path}) or write the pins elsewhere with -o",
            )
        links = st.st_nlink
    backup: Optional[Path] = None
    if links > 1:  # a hard link: rewrite the one file all its names share, after a backup
        try:
            backup = _backup(path)
            with open(path, "r+b") as fh:
                fh.write(new.encode("utf-8"))
                fh.truncate()
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise WriteError(f"cannot write {path}: {exc.strerror or exc}", hint=f"the old contents are in {backup}" if backup else "the old file is unchanged") from None
        warnings.append(f"{path} has {links} hard links: written in place so every name sees the pins")
        return PinResult(path, new, diff, changed, written=True, backup=backup, warnings=tuple(warnings))
    tmp_name: Optional[str] = None
    try:
        fd, tmp_name = tempfile.mkstemp(dir=str(parent), prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(new.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        if old is not None:
            shutil.copymode(path, tmp_name)
            backup = _backup(path)
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as exc:
        raise WriteError(
            f"cannot write {path}: {exc.strerror or exc}", hint="the old file, if any, is unchanged"
        ) from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
    return PinResult(path, new, diff, changed, written=True, backup=backup, warnings=tuple(warnings))
