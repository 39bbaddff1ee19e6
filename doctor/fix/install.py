"""The commands a plan prints, from data (rules/releases/install.json), and a check that each
one is valid for the packages' real metadata in the release catalogue.

    install_commands(...)   ordered pip commands (torch first, then what builds against it),
                            each with what it costs: download size (catalogue) and, where it
                            builds from source, the cited build time and prerequisites
    validate_command(...)   problems with one command: unknown flags, a version that is not
                            a release, an extra not in the release's Provides-Extra, a wheel URL
                            that is not in the flash-attn wheel matrix, an index URL that is not
                            PyTorch's CUDA index
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from doctor.errors import InputError
from doctor.releases.wheels import RELEASES_URL, WheelChoice, _ci_tag
from doctor.fix.companions import IN_TORCH_COMMAND
from doctor.releases.catalogue import ReleaseCatalogue, torch_cuda_index_tag
from doctor.resources import rules_dir
from doctor.versions import parse_version

TORCH_INDEX = re.compile(r"^https://download\.pytorch\.org/whl/cu\d{2,3}$")
PIP_FLAGS = {"--no-build-isolation", "--no-deps", "--force-reinstall", "--index-url", "-c", "--constraint"}
_FA_WHEEL = re.compile(
    r"^flash_attn-(?P<ver>[^+]+)\+cu(?P<cu>\d+)torch(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE|\{TRUE\|FALSE\})-cp(?P<py>\d+|\{XY\})-cp(?P=py)-linux_x86_64\.whl$"
)

# The recipe file's shape (checked by hand: jsonschema costs ~100 ms of import on every `fix`).
RECIPE_KEYS: Dict[str, type] = {
    "order": int,
    "after": list,
    "extras": list,
    "flags": list,
    "wheel_flags": list,
    "wheel_source": str,
    "env": dict,
    "index": str,
    "index_when": str,
    "source": str,
    "builds": dict,
}
BUILD_KEYS: Dict[str, type] = {"what": str, "distribution": str, "prerequisites": list, "time": str, "source": str}


def _schema_errors(doc: Any) -> List[Tuple[str, str]]:
    """(where, what) for each way `doc` departs from the recipe shape."""
    if not isinstance(doc, dict) or not set(doc) <= {"about", "packages"} or not isinstance(doc.get("packages"), dict):
        return [("top level", "must be an object with `packages` (an object) and an optional `about`")]
    out: List[Tuple[str, str]] = []
    for name, r in doc["packages"].items():
        where = f"packages/{name}"
        if not isinstance(r, dict):
            out.append((where, "must be a mapping"))
            continue
        for key, value in r.items():
            kind = RECIPE_KEYS.get(key)
            if kind is None:
                out.append((f"{where}/{key}", "unknown key (known: " + ", ".join(RECIPE_KEYS) + ")"))
            elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                out.append((f"{where}/{key}", f"must be a {kind.__name__}"))
            elif isinstance(value, list) and not all(isinstance(x, str) for x in value):
                out.append((f"{where}/{key}", "must be a list of strings"))
        if not isinstance(r.get("order"), int) or r["order"] < 0:
            out.append((f"{where}/order", "required: an integer >= 0"))
        for key in ("flags", "wheel_flags"):
            for flag in r.get(key) or ():
                if flag not in PIP_FLAGS:
                    out.append((f"{where}/{key}", f"{flag!r} is not one of {', '.join(sorted(PIP_FLAGS))}"))
        b = r.get("builds")
        if isinstance(b, dict):
            for key in b:
                if key not in BUILD_KEYS:
                    out.append((f"{where}/builds/{key}", "unknown key"))
            for key in ("what", "prerequisites", "source"):
                if key not in b:
                    out.append((f"{where}/builds", f"missing {key}"))
    return out


@dataclass(frozen=True)
class Recipe:
    name: str
    order: int
    extras: Tuple[str, ...] = ()
    flags: Tuple[str, ...] = ()
    wheel_flags: Tuple[str, ...] = ()
    env: Mapping[str, str] = None  # type: ignore[assignment]
    index: Optional[str] = None
    builds: Optional[Mapping[str, Any]] = None


@lru_cache(maxsize=4)
def recipes(path: Optional[str] = None) -> Mapping[str, Recipe]:
    """install.json, shape-checked (a malformed file is an input error naming it)."""
    import json

    p = Path(path) if path else rules_dir() / "releases" / "install.json"
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"install recipes: {exc}", path=str(p), hint="see `about` in rules/releases/install.json") from None
    errors = _schema_errors(doc)
    if errors:
        where, what = errors[0]
        raise InputError(f"install recipes: {where}: {what}", path=str(p), hint="see `about` in rules/releases/install.json")
    out: Dict[str, Recipe] = {}
    for name, r in doc["packages"].items():
        out[canonicalize_name(name)] = Recipe(
            name=canonicalize_name(name),
            order=int(r["order"]),
            extras=tuple(r.get("extras") or ()),
            flags=tuple(r.get("flags") or ()),
            wheel_flags=tuple(r.get("wheel_flags") or ()),
            env=dict(r.get("env") or {}),
            index=r.get("index"),
            builds=dict(r["builds"]) if r.get("builds") else None,
        )
    return out


def _recipe(name: str) -> Recipe:
    return recipes().get(name) or Recipe(name=name, order=1, env={})


def _mb(size: Optional[int]) -> str:
    if not size:
        return "size not in the catalogue"
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


@dataclass(frozen=True)
class Command:
    package: str
    text: str
    command: str
    cost: str
    kind: str = "pip"  # pip | wheel | build
    order: int = 1

    @property
    def brief(self) -> str:
        """The cost without the build prerequisites (for alternatives)."""
        return "; ".join(x for x in self.cost.split("; ") if not x.startswith("needs "))


def extras_for(rel: ReleaseCatalogue, name: str, version: str, cuda_major: Optional[int]) -> Tuple[str, ...]:
    """The recipe's extras, plus the CUDA core extra where the release makes the core an
    extra (TE >= 2.9: `core-cu12`), limited to what the release provides."""
    pkg = rel.packages.get(name)
    r = pkg.get(version) if pkg else None
    provided = set(r.provides_extra) if r is not None else set()
    want = list(_recipe(name).extras)
    if cuda_major and f"core-cu{cuda_major}" in provided:
        want.append(f"core-cu{cuda_major}")
    return tuple(e for e in want if not provided or e in provided)


def _size(rel: ReleaseCatalogue, name: str, version: str) -> Optional[int]:
    if name == "torch":
        b = rel.torch_row(version)
        return b.size if b else None
    pkg = rel.packages.get(name)
    r = pkg.get(version) if pkg else None
    return r.size if r else None


def install_commands(
    rel: ReleaseCatalogue,
    pins: Mapping[str, str],
    installed: Mapping[str, str],
    torch_before: Optional[str],
    wheels: Sequence[WheelChoice] = (),
    conflicting: Sequence[str] = (),
    cuda_major: Optional[int] = None,
) -> List[Command]:
    """pip commands for the packages the plan changes, in install order."""
    out: List[Command] = []
    torch_v = pins.get("torch")
    torch_moved = bool(torch_v and parse_version(torch_v) and parse_version(torch_before or "0") and
                       parse_version(torch_v).base_version != parse_version(torch_before or "0").base_version)  # type: ignore[union-attr]
    # companions pinned for the new torch go in torch's own command (and from its index): installed
    # after it on their own, pip would first resolve them against the old torch
    together = [n for n in IN_TORCH_COMMAND if n in pins and torch_moved]
    if torch_v and torch_moved:
        rec = _recipe("torch")
        cmd = "pip install " + " ".join(f'"{n}=={pins[n]}"' for n in ("torch", *together))
        cu = torch_cuda_index_tag(torch_before, torch_v)
        extra = ""
        if cu is not None and rec.index:
            cmd += f" --index-url {rec.index.format(cu=cu)}"
            extra = f"; from PyTorch's {cu} index, as your torch {torch_before} was"
        size = _size(rel, "torch", torch_v)
        what = f"Install torch {torch_v}" + "".join(f" with {n} {pins[n]}" for n in together)
        out.append(Command("torch", what, cmd, f"{_mb(size)} download plus the nvidia-* wheels it pins{extra}", "pip", rec.order))
    for name, version in sorted(pins.items()):
        if name in ("torch", "flash-attn") or name in together:
            continue
        have = installed.get(name)
        if have is not None and (parse_version(have) or have) == (parse_version(version) or version):
            continue
        rec = _recipe(name)
        extras = extras_for(rel, name, version, cuda_major)
        spec = f"{name}[{','.join(extras)}]=={version}" if extras else f"{name}=={version}"
        flags = list(rec.flags)
        text = f"Install {name} {version}"
        if name in conflicting:
            flags.append("--no-deps")
            text += " after torch, without touching torch's other pins (pip reports the conflict below)"
        cmd = " ".join(["pip install", *flags, f'"{spec}"'])
        size = _size(rel, name, version)
        costs = [f"{_mb(size)} download"]
        kind = "pip"
        if rec.builds:
            kind = "build"
            dist = rec.builds.get("distribution")
            if dist:
                costs = [f"{_mb(size)} + {name} core {_mb(_core_size(rel, version, cuda_major))} + {dist} sdist {_mb(_size(rel, dist, version))} download"]
            costs.append(f"builds {rec.builds['what']} from source ({rec.builds.get('time') or 'build time not measured'})")
            costs.append("needs " + "; ".join(rec.builds["prerequisites"]))
        out.append(Command(name, text, cmd, "; ".join(costs), kind, rec.order))
    if torch_moved and "transformer-engine" in installed and "transformer-engine" not in pins:
        te = parse_version(installed["transformer-engine"])
        tv = te.public if te else installed["transformer-engine"]
        if te and not rel.exists("transformer-engine-torch", tv) and rel.exists("transformer-engine-torch", te.base_version):
            tv = te.base_version  # a post release of the meta package (1.9.0.post1) ships the 1.9.0 extension
        rec = _recipe("transformer-engine")
        out.append(
            Command(
                "transformer-engine",
                f"Rebuild TransformerEngine {tv}'s torch extension against torch {torch_v}",
                f'pip install --no-build-isolation --no-deps --force-reinstall "transformer-engine-torch=={tv}"',
                f"{_mb(_size(rel, 'transformer-engine-torch', tv))} sdist; builds from source ({(rec.builds or {}).get('time') or 'build time not measured'})",
                "build",
                rec.order,
            )
        )
    for wheel in wheels:
        rec = _recipe("flash-attn")
        if wheel.available and wheel.url:
            wflags = " ".join(rec.wheel_flags + ("--force-reinstall",))
            text = f"Install the prebuilt flash-attn {wheel.version} wheel for this torch"
            if "{" in wheel.url:
                text += " (fill in " + " and ".join(x for x in ("cp{XY}: your CPython tag" if "{XY}" in wheel.url else "", "cxx11abi{TRUE|FALSE}: torch._C._GLIBCXX_USE_CXX11_ABI" if "{TRUE" in wheel.url else "") if x) + ")"
            out.append(Command("flash-attn", text, f"pip install {wflags} {wheel.url}", "a prebuilt wheel (GitHub release asset; no build)", "wheel", rec.order))
        else:
            envs = " ".join(f"{k}={v}" for k, v in sorted((rec.env or {}).items()))
            cmd = f'{envs} FLASH_ATTENTION_FORCE_BUILD=TRUE pip install {" ".join(rec.flags)} "flash-attn=={wheel.version}"'.strip()
            fb: Mapping[str, Any] = rec.builds or {}
            fcost = f"{_mb(_size(rel, 'flash-attn', wheel.version))} sdist; builds from source: {fb.get('time') or 'build time not measured'}; needs " + "; ".join(fb.get("prerequisites") or ())
            text = f"Build flash-attn {wheel.version} from source (no prebuilt wheel fits)"
            if wheel.build_fails:
                text += f"; warning: {wheel.build_fails}"
            out.append(Command("flash-attn", text, cmd, fcost, "build", rec.order))
    return sorted(out, key=lambda c: c.order)


def _core_size(rel: ReleaseCatalogue, version: str, cuda_major: Optional[int]) -> Optional[int]:
    return _size(rel, f"transformer-engine-cu{cuda_major or 12}", version)


# --------------------------------------------------------------------------- validation


def validate_command(command: str, rel: ReleaseCatalogue) -> List[str]:
    """What is wrong with one printed pip command, judged by the catalogue ([] when valid)."""
    problems: List[str] = []
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return [f"cannot parse: {exc}"]
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words.pop(0)
    if words[:2] != ["pip", "install"]:
        return [f"not a pip install command: {command}"]
    args = words[2:]
    reqs: List[str] = []
    index = None
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            if a not in PIP_FLAGS:
                problems.append(f"unknown flag {a}")
            if a in ("--index-url", "-c", "--constraint"):
                i += 1
                if a == "--index-url":
                    index = args[i] if i < len(args) else ""
            i += 1
            continue
        reqs.append(a)
        i += 1
    if not reqs:
        problems.append("installs nothing")
    for r in reqs:
        if r.startswith("https://"):
            problems += _validate_wheel_url(r, rel)
            continue
        try:
            req = Requirement(r)
        except InvalidRequirement as exc:
            problems.append(f"{r}: {exc}")
            continue
        name = canonicalize_name(req.name)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if not pins:
            problems.append(f"{r}: not pinned to one version")
            continue
        version = pins[0]
        if name == "torch":
            if rel.torch_row(version) is None:
                problems.append(f"torch=={version} is not in the catalogue's torch table")
        elif not rel.exists(name, version):
            problems.append(f"{name}=={version} is not a release in the catalogue")
            continue
        if index is not None and (name != "torch" or not TORCH_INDEX.match(index)):
            problems.append(f"--index-url {index} is not PyTorch's CUDA index for torch")
        if req.extras:
            pkg = rel.packages.get(name)
            rel_ = pkg.get(version) if pkg else None
            provided = set(rel_.provides_extra) if rel_ is not None else set()
            for e in req.extras:
                if canonicalize_name(e) not in provided:
                    problems.append(f"{name} {version} has no extra [{e}] (Provides-Extra: {', '.join(sorted(provided)) or 'none'})")
    return problems


def _validate_wheel_url(url: str, rel: ReleaseCatalogue) -> List[str]:
    prefix, _, filename = url.rpartition("/")
    m = _FA_WHEEL.match(filename)
    if not m:
        return [f"{filename}: not a flash-attn wheel name"]
    ver = m.group("ver")
    if prefix != f"{RELEASES_URL}/v{ver}":
        return [f"{url}: not under {RELEASES_URL}/v{ver}"]
    builds = rel.flash_attn_wheels.get(ver)
    if not builds:
        return [f"flash-attn {ver} has no wheel matrix in the catalogue"]
    row = next((b for b in builds if b.torch == m.group("torch")), None)
    if row is None:
        return [f"flash-attn {ver} built no wheels for torch {m.group('torch')}"]
    problems = []
    if m.group("cu") not in {_ci_tag(ver, c) for c in row.cuda}:
        problems.append(f"flash-attn {ver} has no cu{m.group('cu')} wheel for torch {row.torch}")
    py = m.group("py")  # {XY}: Python not probed, the step says to fill it in
    if py != "{XY}" and f"{py[0]}.{py[1:]}" not in row.python:
        problems.append(f"flash-attn {ver} has no cp{py} wheel for torch {row.torch}")
    if m.group("abi") in ("TRUE", "FALSE") and (m.group("abi") == "TRUE") not in row.cxx11_abi:
        problems.append(f"flash-attn {ver} has no cxx11abi{m.group('abi')} wheel for torch {row.torch}")
    return problems
