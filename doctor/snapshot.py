"""Read, check and write snapshot files: the probe's document saved as JSON or YAML.

A snapshot taken inside a GPU training image can be checked later on a CPU-only CI runner
(`attn-doctor check --env snapshot.json`). Every problem with the file is an `InputError`
naming the file and line, so the CLI exits 2 with one line a person can act on. A
hand-written snapshot with only some sections loads: what is absent is unknown.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from doctor.bounded import parse_document, read_text
from doctor.errors import InputError
from doctor.model import (
    CudnnFile,
    CudnnFolder,
    CudnnSearch,
    SCHEMA_VERSION,
    CudaInfo,
    CudnnInfo,
    Facts,
    GpuInfo,
    ImportStatus,
    PlatformInfo,
    PythonInfo,
    TorchInfo,
    frozen_map,
)

RECREATE = "fix the file or re-create it with `attn-doctor probe --format json > FILE`"
IMPORT_STATUSES = ("ok", "error", "missing", "timeout", "present")
# section -> field -> kind (text | bool | int | text_list | text_map | rows); other keys pass
SECTION_FIELDS: Dict[str, Dict[str, str]] = {
    "python": {"version": "text", "implementation": "text", "executable": "text"},
    "platform": {"os": "text", "arch": "text", "libc": "text"},
    "torch": {
        "version": "text", "cuda": "text", "hip": "text", "git_version": "text", "cudnn_version": "text",
        "cxx11_abi": "bool", "cuda_available": "bool", "device_count": "int", "arch_list": "text_list",
    },
    "cuda": {"driver_version": "text", "driver_cuda": "text", "runtime": "text", "runtime_wheels": "text_map", "xformers_build": "text", "xformers_fa3": "bool",
             "flash_attn_archs": "text_list"},
    "cudnn": {
        "version": "text", "loaded": "text", "loaded_path": "text", "installed": "text", "bundled": "text",
        "bundled_dist": "text", "mismatch": "text", "wheels": "rows", "system": "rows",
    },
}
TOP_TEXT = ("host", "doctor_version", "created")
TOP_MAPS = ("packages", "env", "unknown", "provenance")
SECTIONS = (
    "schema_version", "doctor_version", "created", "host", "python", "platform", "packages", "requires",
    "torch", "cuda", "cudnn", "gpus", "imports", "env", "contracts", "unknown", "provenance",
)
_CC = re.compile(r"^\d+\.\d+$")

# Fields that hold a version. A value must start like one (PEP 440, or the local/NGC/ROCm forms
# that begin with a numeric release: 2.3.0a0+6ddf5cf.nv24.04, 6.0.32830-d62f6a171, 90100);
# "latest", "abc" or "" would make rules pass or fire on a version nobody has.
VERSION_FIELDS = {
    "torch": ("version", "cuda", "hip", "cudnn_version"),
    "cuda": ("driver_version", "driver_cuda", "runtime"),
    "cudnn": ("version", "loaded", "installed", "bundled"),
    "python": ("version",),
}
_VERSION_START = re.compile(r"^[vV]?\d+(?:\.\d+)*(?:$|[.+\-_!a-zA-Z0-9])")

Key = Union[str, int]


class _Locator:
    """Line numbers for key paths, found only when an error needs one (parses with yaml)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._root: Any = None
        self._parsed = False

    def _tree(self) -> Any:
        if not self._parsed:
            self._parsed = True
            try:
                import yaml

                self._root = yaml.compose(self.text, Loader=yaml.SafeLoader)
            except Exception:  # noqa: BLE001 - best effort: fall back to a text search
                self._root = None
        return self._root

    def line(self, path: Sequence[Key]) -> Optional[int]:
        """1-based line of the last key of `path` that exists in the file (None if not found)."""
        import yaml

        node = self._tree()
        found: Optional[int] = None
        for key in path:
            child = None
            if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
                child = node.value[key]
                found = child.start_mark.line + 1
            elif isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if getattr(k, "value", None) == str(key):
                        child, found = v, k.start_mark.line + 1
                        break
            if child is None:
                break
            node = child
        if found is None:
            last = next((k for k in reversed(path) if isinstance(k, str)), None)
            pattern = re.compile(r'(^|[\s{,"])' + re.escape(str(last)) + r'"?\s*:')
            for i, text_line in enumerate(self.text.splitlines(), 1):
                if last is not None and pattern.search(text_line):
                    return i
        return found


def _dotted(path: Sequence[Key]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


class _Checker:
    def __init__(self, path: str, locator: _Locator) -> None:
        self.path = path
        self.locator = locator

    def fail(self, where: Sequence[Key], message: str, hint: Optional[str] = None) -> InputError:
        return InputError(
            f"{_dotted(where)}: {message}" if where else message,
            path=self.path,
            line=self.locator.line(where) if where else 1,
            hint=hint,
        )

    def text(self, value: Any, where: Sequence[Key], *, optional: bool = True) -> Optional[str]:
        """A string; ints become strings, floats and booleans are refused (YAML 2.10 -> 2.1)."""
        if value is None and optional:
            return None
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, float):
            raise self.fail(
                where,
                f"expected a string, got the number {value!r}",
                hint='quote it in the file, e.g. "2.10": unquoted, YAML reads 2.10 as the number 2.1',
            )
        raise self.fail(where, f"expected a string, got {type(value).__name__}")

    def typed(self, value: Any, kind: type, where: Sequence[Key], label: str) -> Any:
        if value is None:
            return None
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise self.fail(where, f"expected {label}, got {type(value).__name__} {value!r}")
        return value

    def mapping(self, value: Any, where: Sequence[Key], *, optional: bool = True) -> Optional[Dict[str, Any]]:
        if value is None and optional:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        return {str(k): v for k, v in value.items()}

    def seq(self, value: Any, where: Sequence[Key]) -> Optional[List[Any]]:
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def str_map(self, value: Any, where: Sequence[Key]) -> Optional[Dict[str, Optional[str]]]:
        m = self.mapping(value, where)
        if m is None:
            return None
        return {k: self.text(v, [*where, k]) for k, v in m.items()}

    def value(self, kind: str, value: Any, where: List[Key]) -> Any:
        """Check one field against its kind in SECTION_FIELDS."""
        if kind == "text":
            return self.text(value, where)
        if kind == "bool":
            return self.typed(value, bool, where, "true/false")
        if kind == "int":
            return self.typed(value, int, where, "an integer")
        if kind == "text_map":
            return self.str_map(value, where)
        items = self.seq(value, where)
        if items is None:
            return None
        if kind == "text_list":
            return [self.text(x, [*where, i], optional=False) for i, x in enumerate(items)]
        # "rows": a list of flat mappings of strings
        return [
            {k: self.text(x, [*where, i, k]) for k, x in (self.mapping(row, [*where, i], optional=False) or {}).items()}
            for i, row in enumerate(items)
        ]


def _compute_capability(ck: _Checker, value: Any, where: Sequence[Key]) -> str:
    if isinstance(value, float) and _CC.match(repr(value)):
        value = repr(value)  # YAML `8.0`: one decimal, so no 2.10 -> 2.1 ambiguity
    if not isinstance(value, str) or not _CC.match(value):
        raise ck.fail(
            where,
            f"compute capability must be \"X.Y\" (like \"8.0\" or \"9.0\"), got {value!r}",
            hint='sm_80 is "8.0", sm_90 is "9.0", sm_120 is "12.0"',
        )
    return value


def _check_gpus(ck: _Checker, value: Any) -> Optional[List[Dict[str, Any]]]:
    gpus = ck.seq(value, ["gpus"])
    if gpus is None:
        return None
    checked = []
    for i, item in enumerate(gpus):
        where: List[Key] = ["gpus", i]
        gpu = ck.mapping(item, where, optional=False) or {}
        if "compute_capability" not in gpu:
            raise ck.fail(where, 'a GPU needs compute_capability ("8.0")', hint=RECREATE)
        gpu["compute_capability"] = _compute_capability(ck, gpu["compute_capability"], [*where, "compute_capability"])
        gpu.setdefault("index", i)
        ck.typed(gpu["index"], int, [*where, "index"], "an integer")
        gpu["name"] = ck.text(gpu.get("name", "unknown GPU"), [*where, "name"], optional=False)
        ck.typed(gpu.get("memory_mib"), int, [*where, "memory_mib"], "an integer (MiB)")
        checked.append(gpu)
    return checked


def _check_imports(ck: _Checker, value: Any) -> Dict[str, Dict[str, Any]]:
    imports = ck.mapping(value, ["imports"]) or {}
    for mod, st in imports.items():
        where: List[Key] = ["imports", mod]
        entry = ck.mapping(st, where, optional=False) or {}
        status = entry.get("status")
        if status not in IMPORT_STATUSES:
            raise ck.fail(
                [*where, "status"] if "status" in entry else where,
                f"import status must be one of {', '.join(IMPORT_STATUSES)}, got {status!r}",
            )
        imports[mod] = {k: (v if k == "status" else ck.text(v, [*where, k])) for k, v in entry.items()}
    return imports


def _is_version(value: str) -> bool:
    return bool(_VERSION_START.match(value.strip())) and value == value.strip()


def _check_version(ck: _Checker, value: Optional[str], where: Sequence[Key], what: str) -> None:
    if value is None or _is_version(value):
        return
    raise ck.fail(
        where,
        f"{value!r} is not a version",
        hint=f"write the {what} as the tool reports it (e.g. \"2.3.0\"), or remove the key if it is unknown",
    )


def _check_versions(ck: _Checker, out: Mapping[str, Any]) -> None:
    for name, version in (out.get("packages") or {}).items():
        _check_version(ck, version, ["packages", name], "installed version")
    for section, keys in VERSION_FIELDS.items():
        values = out.get(section)
        if isinstance(values, Mapping):
            for key in keys:
                if isinstance(values.get(key), str):
                    _check_version(ck, values[key], [section, key], "version")
    cuda = out.get("cuda")
    if isinstance(cuda, Mapping):
        for name, version in (cuda.get("runtime_wheels") or {}).items():
            _check_version(ck, version, ["cuda", "runtime_wheels", name], "version")
    cudnn = out.get("cudnn")
    if isinstance(cudnn, Mapping):
        for rows in ("wheels", "system"):
            for i, row in enumerate(cudnn.get(rows) or []):
                if isinstance(row.get("version"), str):
                    _check_version(ck, row["version"], ["cudnn", rows, i, "version"], "version")
    for i, gpu in enumerate(out.get("gpus") or []):
        mem = gpu.get("memory_mib")
        if isinstance(mem, int) and mem < 0:
            raise ck.fail(["gpus", i, "memory_mib"], f"memory must be >= 0 MiB, got {mem}")


def _check_cudnn_file(ck: _Checker, value: Any, where: List[Key]) -> Optional[Dict[str, Optional[str]]]:
    row = ck.mapping(value, where)
    if row is None:
        return None
    out = {k: ck.text(row.get(k), [*where, k], optional=k != "path") for k in ("path", "version")}
    _check_version(ck, out["version"], [*where, "version"], "version")
    return out


def _check_cudnn_search(ck: _Checker, value: Any) -> Optional[Dict[str, Any]]:
    """cudnn.search: {folders: [{var, dir, path, version, error}], unversioned: {path, version} | null}."""
    where: List[Key] = ["cudnn", "search"]
    search = ck.mapping(value, where)
    if search is None:
        return None
    folders = []
    for i, row in enumerate(ck.seq(search.get("folders"), [*where, "folders"]) or []):
        at: List[Key] = [*where, "folders", i]
        m = ck.mapping(row, at, optional=False) or {}
        folder = {k: ck.text(m.get(k), [*at, k], optional=k != "dir") for k in ("var", "dir", "path", "version", "error")}
        _check_version(ck, folder["version"], [*at, "version"], "version")
        folders.append(folder)
    return {"folders": folders, "unversioned": _check_cudnn_file(ck, search.get("unversioned"), [*where, "unversioned"])}


def cudnn_search_doc(search: Optional[CudnnSearch]) -> Optional[Dict[str, Any]]:
    """The snapshot form of CudnnSearch (cudnn_search_from_doc reads it back)."""
    if search is None:
        return None

    def one(f: Optional[CudnnFile]) -> Optional[Dict[str, Optional[str]]]:
        return None if f is None else {"path": f.path, "version": f.version}

    return {
        "folders": [
            {"var": f.var, "dir": f.dir, "path": f.found.path if f.found else None,
             "version": f.found.version if f.found else None, "error": f.error}
            for f in search.folders
        ],
        "unversioned": one(search.unversioned),
    }


def cudnn_search_from_doc(doc: Any) -> Optional[CudnnSearch]:
    """CudnnSearch from a (checked) cudnn.search mapping; None when the snapshot has none."""
    if not isinstance(doc, Mapping):
        return None
    folders = tuple(
        CudnnFolder(
            var=f.get("var"), dir=str(f.get("dir")),
            found=CudnnFile(str(f["path"]), f.get("version")) if f.get("path") else None,
            error=f.get("error"),
        )
        for f in doc.get("folders") or () if isinstance(f, Mapping)
    )
    un = doc.get("unversioned")
    return CudnnSearch(
        folders=folders,
        unversioned=CudnnFile(str(un["path"]), un.get("version")) if isinstance(un, Mapping) and un.get("path") else None,
    )


CONTRACT_VERDICTS = ("binds", "breaks", "undecided")
CONTRACT_PAIR_TEXT = ("id", "caller", "caller_version", "callee", "callee_version")
CONTRACT_SITE_TEXT = ("pair", "kind", "site", "symbol", "reason")
STARTUP_CHECK_TEXT = ("check", "dist", "version", "file", "status")
STARTUP_ROW_TEXT = ("check", "site", "requirement")


def _check_contracts(ck: _Checker, value: Any) -> Optional[Dict[str, Any]]:
    """The contract analysis: {pairs: [{id, caller, ...}], sites: [{pair, site, verdict, ...}]}."""
    section = ck.mapping(value, ["contracts"])
    if section is None:
        return None
    for key, label, names in (("pairs", "contract pair", CONTRACT_PAIR_TEXT), ("sites", "contract site", CONTRACT_SITE_TEXT),
                              ("startup_checks", "start-up check", STARTUP_CHECK_TEXT),
                              ("startup", "start-up requirement", STARTUP_ROW_TEXT)):
        rows = ck.seq(section.get(key), ["contracts", key]) or []
        for i, row in enumerate(rows):
            where: List[Key] = ["contracts", key, i]
            m = ck.mapping(row, where, optional=False) or {}
            for f in names:
                if m.get(f) is None:
                    raise ck.fail(where, f"a {label} needs {f!r}", hint=RECREATE)
                m[f] = ck.text(m[f], [*where, f], optional=False)
            if key == "sites" and m.get("verdict") not in CONTRACT_VERDICTS:
                raise ck.fail([*where, "verdict"], f"verdict must be one of {', '.join(CONTRACT_VERDICTS)}, got {m.get('verdict')!r}")
            if key == "startup" and not isinstance(m.get("mandatory", False), bool):
                raise ck.fail([*where, "mandatory"], "mandatory must be true or false")
            if key == "startup_checks" and "skip_values" in m:
                # the values the install accepts for its skip variable: an empty one would read an unset variable as set
                values = ck.seq(m["skip_values"], [*where, "skip_values"]) or []
                m["skip_values"] = [ck.text(v, [*where, "skip_values", j], optional=False) for j, v in enumerate(values)]
                if any(not v.strip() for v in m["skip_values"]):
                    raise ck.fail([*where, "skip_values"], "skip_values must be non-empty strings")
            rows[i] = m
        if key in ("pairs", "sites") or key in section:  # the start-up keys only where the probe wrote them
            section[key] = rows
    return section


def validate_snapshot(doc: Any, path: Union[str, Path] = "<snapshot>", text: Optional[str] = None) -> Dict[str, Any]:
    """Check a parsed snapshot and return it normalized (ints that are versions become strings).

    `text` is the file's content, used only to find line numbers for errors.
    """
    name = str(path)
    ck = _Checker(name, _Locator(text or ""))
    if not isinstance(doc, Mapping):
        kind = "a list" if isinstance(doc, list) else type(doc).__name__
        raise InputError(
            f"the top level must be a mapping of sections (packages, torch, gpus, ...), got {kind}",
            path=name,
            line=1,
            hint=RECREATE,
        )
    out: Dict[str, Any] = {str(k): v for k, v in doc.items()}
    version = out.get("schema_version")
    if version is None:
        out["schema_version"] = SCHEMA_VERSION
        prov = out.get("provenance")
        prov = dict(prov) if isinstance(prov, Mapping) else {}
        out["provenance"] = {**prov, "schema_version": "assumed 1 (absent from the file)"}
    elif version != SCHEMA_VERSION or isinstance(version, bool):
        raise ck.fail(
            ["schema_version"],
            f"unsupported schema_version {version!r}: this attn-doctor reads version {SCHEMA_VERSION}",
            hint="upgrade attn-doctor, or re-create the snapshot with this version's `attn-doctor probe --format json`",
        )

    unknown_keys = [k for k in out if k not in SECTIONS]
    if unknown_keys:
        import difflib

        key = unknown_keys[0]
        close = difflib.get_close_matches(key, SECTIONS, n=1)
        raise ck.fail(
            [key],
            f"unknown section {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            hint="a snapshot holds " + ", ".join(SECTIONS) + "; is this a snapshot file?",
        )
    for key in TOP_MAPS:
        if key in out:
            out[key] = ck.str_map(out[key], [key])
    for key in TOP_TEXT:
        if key in out:
            out[key] = ck.text(out[key], [key])
    for section, spec in SECTION_FIELDS.items():
        if section in out:
            fields = ck.mapping(out[section], [section])
            if fields is not None:
                for key, kind in spec.items():
                    if key in fields:
                        fields[key] = ck.value(kind, fields[key], [section, key])
            out[section] = fields
    if "gpus" in out:
        out["gpus"] = _check_gpus(ck, out["gpus"])
    if "imports" in out:
        out["imports"] = _check_imports(ck, out["imports"])
    if "contracts" in out:
        out["contracts"] = _check_contracts(ck, out["contracts"])
    if "requires" in out:
        reqs = ck.mapping(out["requires"], ["requires"])
        out["requires"] = None if reqs is None else {
            str(k): [ck.text(x, ["requires", k, i], optional=False) for i, x in enumerate(ck.seq(v, ["requires", k]) or [])]
            for k, v in reqs.items()
        }
    if isinstance(out.get("cudnn"), dict) and "search" in out["cudnn"]:
        out["cudnn"]["search"] = _check_cudnn_search(ck, out["cudnn"]["search"])
    _check_versions(ck, out)
    return out


def parse_snapshot(text: str, path: Union[str, Path] = "<snapshot>") -> Dict[str, Any]:
    """Parse JSON or YAML text (JSON first unless the name ends in .yaml/.yml) and validate it."""
    name = str(path)
    if not text.strip():
        raise InputError("empty file, not a snapshot", path=name, hint=RECREATE)
    suffix = Path(name).suffix.lower()
    as_yaml = suffix in (".yaml", ".yml")
    doc: Any
    if not as_yaml:
        try:
            doc = parse_document(text, "json", name=name, hint=RECREATE)
        except json.JSONDecodeError as exc:
            if suffix == ".json" or text.lstrip()[:1] in ("{", "["):
                raise InputError(f"invalid JSON: {exc.msg}", path=name, line=exc.lineno, hint=RECREATE) from None
            as_yaml = True
    if as_yaml:
        doc = _parse_yaml(text, name)
    return validate_snapshot(doc, name, text)


def _parse_yaml(text: str, name: str) -> Any:
    from doctor.yamlio import load_yaml

    return load_yaml(text, name, hint=RECREATE)


def load_snapshot(path: Union[str, Path]) -> Dict[str, Any]:
    """Read a snapshot file. Raises InputError (exit 2) with file and line on any problem."""
    text = read_text(path, what="snapshot file", hint=RECREATE)
    return parse_snapshot(text, str(path))


def _section(cls: type, data: Any) -> Any:
    if not isinstance(data, Mapping):
        return cls()
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    for key in ("arch_list", "flash_attn_archs"):
        if kwargs.get(key) is not None:
            kwargs[key] = tuple(kwargs[key])
    return cls(**kwargs)


def _cuda_from_label(version: str) -> Optional[str]:
    """'2.4.1+cu121' -> '12.1', '2.9.0+cu130' -> '13.0'; None when the label does not say."""
    import re

    m = re.search(r"\+cu(\d{2,3})\b", version)
    return f"{m.group(1)[:-1]}.{m.group(1)[-1]}" if m else None


def _hip_from_label(version: str) -> Optional[str]:
    """'2.6.0+rocm6.2.4' -> '6.2.4' (PyTorch's ROCm index labels); None when the label does not say."""
    m = re.search(r"\+rocm(\d+(?:\.\d+)*)", version)
    return m.group(1) if m else None


def _other_system_cudnn(system: Any, effective: Optional[str]) -> Optional[str]:
    """The version of the first system libcudnn that differs from the effective cuDNN; ""
    when the snapshot lists the system libraries and none differs; None when it does not say."""
    if system is None:
        return None
    entries = system if isinstance(system, (list, tuple)) else [system]
    for e in entries:
        v = e.get("version") if isinstance(e, Mapping) else e
        if v and str(v) != str(effective):
            return str(v)
    return ""


def facts_from_snapshot(doc: Mapping[str, Any], source: str = "probe") -> Facts:
    """Build Facts from a snapshot document (already checked by doctor.snapshot)."""
    unknown = dict(doc.get("unknown") or {})
    for key in ("packages", "gpus", "env"):
        if key not in doc:
            unknown.setdefault(key, "not in snapshot")
    gpus = None
    if isinstance(doc.get("gpus"), list):
        gpus = tuple(
            GpuInfo(
                index=int(g.get("index", i)),
                name=str(g.get("name", "unknown GPU")),
                compute_capability=str(g.get("compute_capability")),
                memory_mib=g.get("memory_mib"),
            )
            for i, g in enumerate(doc["gpus"])
            if g.get("compute_capability") is not None
        )
    imports = {
        name: ImportStatus(
            status=str(st.get("status", "error")), error=st.get("error"), cause=st.get("cause"), fix=st.get("fix")
        )
        for name, st in (doc.get("imports") or {}).items()
        if isinstance(st, Mapping)
    }
    packages = doc.get("packages")
    torch = _section(TorchInfo, doc.get("torch"))
    if "torch" not in doc:
        # No torch section: the build facts are unknown, except what the version label says.
        unknown.setdefault("torch", "no torch section in the snapshot")
        if isinstance(packages, Mapping) and "torch" in packages:
            version = str(packages["torch"])
            torch = replace(torch, version=version, cuda=_cuda_from_label(version), hip=_hip_from_label(version))
            if torch.cuda is not None or torch.hip is not None or re.search(r"\+(cpu|xpu)\b", version):
                unknown.pop("torch", None)  # the label says which build it is
    cudnn = _section(CudnnInfo, doc.get("cudnn"))
    if cudnn.version is None:
        cudnn = replace(cudnn, version=cudnn.loaded or torch.cudnn_version or cudnn.installed)
    cudnn = replace(
        cudnn,
        system=_other_system_cudnn(cudnn.system, cudnn.version),
        search=cudnn_search_from_doc((doc.get("cudnn") or {}).get("search")),
    )
    env = doc.get("env")
    return Facts(
        packages=frozen_map({str(k): str(v) for k, v in packages.items()})
        if isinstance(packages, Mapping)
        else None,
        torch=torch,
        cuda=_section(CudaInfo, doc.get("cuda")),
        cudnn=cudnn,
        gpus=gpus,
        env=frozen_map({str(k): str(v) for k, v in env.items()}) if isinstance(env, Mapping) else None,
        imports=MappingProxyType(imports),
        python=_section(PythonInfo, doc.get("python")),
        platform=_section(PlatformInfo, doc.get("platform")),
        host=doc.get("host"),
        unknown=MappingProxyType(unknown),
        source=source,
        contracts=frozen_map(doc["contracts"]) if isinstance(doc.get("contracts"), Mapping) else None,
        requires=frozen_map({str(k): tuple(str(x) for x in v) for k, v in doc["requires"].items()})
        if isinstance(doc.get("requires"), Mapping)
        else None,
    )


def dump(doc: Mapping[str, Any], fmt: str = "json") -> str:
    """The snapshot as JSON (default) or YAML text, ending in a newline."""
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
