"""`probe` as text: what is installed and loaded, section by section, rendered with rich.

A pure function of the snapshot document. Colour only when stdout is a terminal and NO_COLOR
is unset (or when the caller asks); the width follows the terminal, else 100 columns.
"""

from __future__ import annotations

import io
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

# (label, import names, distributions that provide them)
ATTENTION_LIBS: Tuple[Tuple[str, Tuple[str, ...], Tuple[str, ...]], ...] = (
    ("flash-attn (FA2)", ("flash_attn", "flash_attn_2_cuda"), ("flash-attn",)),
    ("FlashAttention-3", ("flash_attn_interface",), ("flash-attn-3",)),
    ("FlashAttention-4", ("flash_attn.cute",), ("flash-attn-4",)),
    ("TransformerEngine", ("transformer_engine", "transformer_engine.pytorch"), ("transformer-engine", "transformer-engine-torch")),
    ("xformers", ("xformers",), ("xformers",)),
)
FRAMEWORKS: Tuple[str, ...] = (
    "transformers", "accelerate", "deepspeed", "megatron-core", "nemo-toolkit", "xtuner", "trl",
    "peft", "vllm", "sglang", "triton", "bitsandbytes", "liger-kernel", "lightning",
    "pytorch-lightning", "torchtitan", "axolotl", "llamafactory", "unsloth", "mmengine",
    "flex-attention", "kernels",
)
STATUS_STYLE = {"ok": "green", "error": "bold red", "timeout": "yellow", "missing": "dim", "present": "green"}


def _v(value: Any, unknown: str = "unknown") -> str:
    if value is None:
        return unknown
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _section(title: str) -> Text:
    return Text("\n" + title, style="bold underline")


def _indent(renderable: Any) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _line(text: str, style: str = "") -> Padding:
    return _indent(Text(text, style=style))


def _table(*columns: str) -> Table:
    t = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold", show_header=bool(columns))
    for col in columns:
        t.add_column(col)
    return t


def _kv_table(rows: Iterable[Tuple[str, Any]]) -> Padding:
    t = _table()
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for k, v in rows:
        t.add_row(k, v if isinstance(v, Text) else Text(str(v)))
    return _indent(t)


def _unknown(doc: Mapping[str, Any], key: str) -> Optional[str]:
    unk = doc.get("unknown") or {}
    return unk.get(key)


def _gpu_part(doc: Mapping[str, Any]) -> List[Any]:
    cuda = doc.get("cuda") or {}
    prov = doc.get("provenance") or {}
    out: List[Any] = [_section("GPU and driver")]
    driver = cuda.get("driver_version")
    if driver:
        line = f"driver {driver}"
        if cuda.get("driver_cuda"):
            line += f", supports CUDA up to {cuda['driver_cuda']}"
        if prov.get("cuda.driver_version"):
            line += f"  (from {prov['cuda.driver_version']})"
        out.append(_line(line))
    gpus = doc.get("gpus")
    if gpus is None:
        why = _unknown(doc, "gpus") or "not in the snapshot"
        out.append(_line("GPUs unknown: " + why, "yellow"))
        return out
    if not gpus:
        out.append(_line("no NVIDIA GPU found"))
        return out
    t = _table("#", "GPU", "compute capability", "memory")
    for g in gpus:
        mem = g.get("memory_mib")
        t.add_row(
            str(g.get("index", "")),
            str(g.get("name", "")),
            f"{g.get('compute_capability')} (sm_{str(g.get('compute_capability', '')).replace('.', '')})",
            f"{mem / 1024:.0f} GiB" if isinstance(mem, int) else "unknown",
        )
    out.append(_indent(t))
    return out


def _torch_line(doc: Mapping[str, Any]) -> Text:
    torch = doc.get("torch") or {}
    if not torch.get("version"):
        listed = (doc.get("packages") or {}).get("torch")
        if listed and "torch" not in doc:  # a hand-written snapshot: the version, but no build facts
            return Text(f"{listed} (build facts not in the snapshot)")
        return Text(_unknown(doc, "torch") or "not installed", style="dim")
    build = f"CUDA {torch['cuda']}" if torch.get("cuda") else (f"ROCm {torch['hip']}" if torch.get("hip") else "CPU-only build")
    text = Text(f"{torch['version']} ({build}")
    if torch.get("cxx11_abi") is not None:
        text.append(f", cxx11abi {str(torch['cxx11_abi']).upper()}")
    text.append(")")
    if torch.get("cuda_available") is not None:
        count = torch.get("device_count")
        text.append(f"; CUDA available: {_v(torch['cuda_available'])}")
        if torch["cuda_available"] and count is not None:
            text.append(f", {count} device{'s' if count != 1 else ''}")
    elif _unknown(doc, "torch.cuda_available"):
        text.append("; not imported (loaded facts unknown)", style="dim")
    arch = torch.get("arch_list")
    if arch:
        text.append(f"; kernels for {' '.join(arch)}")
    return text


def _cuda_part(doc: Mapping[str, Any]) -> List[Any]:
    cuda = doc.get("cuda") or {}
    cudnn = doc.get("cudnn") or {}
    rows: List[Tuple[str, Any]] = [("torch", _torch_line(doc))]
    rows.append(("CUDA runtime", _v(cuda.get("runtime"), _unknown(doc, "cuda.runtime") or "unknown")))
    wheels = cuda.get("runtime_wheels") or {}
    if wheels:
        rows.append(("CUDA wheels", ", ".join(f"{k} {v}" for k, v in wheels.items())))
    loaded = cudnn.get("loaded")
    if "cudnn" not in doc:
        loaded_text = "unknown: not in the snapshot"
    elif loaded:
        loaded_text = f"{loaded}" + (f"  {cudnn['loaded_path']}" if cudnn.get("loaded_path") else "")
    elif _unknown(doc, "cudnn.loaded"):
        loaded_text = "unknown: " + str(_unknown(doc, "cudnn.loaded"))
    else:
        loaded_text = "none (this torch loads no cuDNN)"
    rows.append(("cuDNN loaded", loaded_text))
    installed = [f"{w.get('dist')} {w.get('version')}" for w in cudnn.get("wheels") or []]
    installed += [f"{s.get('path')} ({s.get('version') or 'version unknown'})" for s in cudnn.get("system") or []]
    rows.append(("cuDNN installed", "; ".join(installed) if installed else ("unknown: not in the snapshot" if "cudnn" not in doc else "none found")))
    if cudnn.get("bundled"):
        rows.append(("cuDNN torch pins", f"{cudnn.get('bundled_dist') or 'nvidia-cudnn'}=={cudnn['bundled']}"))
    elif (doc.get("torch") or {}).get("version"):
        rows.append(("cuDNN torch pins", "none (torch's metadata pins no cuDNN wheel)"))
    out: List[Any] = [_section("CUDA and cuDNN"), _kv_table(rows)]
    if cudnn.get("mismatch"):
        out.append(_line("✗ cuDNN mismatch:", "bold red"))
        bullets = _table()
        bullets.padding = (0, 1, 0, 0)
        bullets.add_column(no_wrap=True)
        bullets.add_column(overflow="fold")
        for problem in str(cudnn["mismatch"]).splitlines():
            bullets.add_row("-", Text(problem, style="red"))
        out.append(Padding(bullets, (0, 0, 0, 4)))
    return out


def _attention_part(doc: Mapping[str, Any]) -> List[Any]:
    imports = doc.get("imports") or {}
    packages = doc.get("packages") or {}
    t = _table("library", "version", "import", "detail")
    notes: Dict[Tuple[str, str], None] = {}  # (fix, error) pairs, each shown once
    absent: List[str] = []
    for label, modules, dists in ATTENTION_LIBS:
        version = next((packages[d] for d in dists if d in packages), None)
        statuses = [imports.get(m) for m in modules]
        if version is None and all(st is not None and st.get("status") == "missing" for st in statuses):
            absent.append(label)
            continue
        for i, (mod, st) in enumerate(zip(modules, statuses)):
            if st is None:
                status, style = "unknown", "yellow"
                detail = _unknown(doc, f"imports.{mod}") or "not in the snapshot"
            else:
                status = str(st.get("status"))
                style = STATUS_STYLE.get(status, "")
                detail = st.get("cause") or (st.get("error") if status in ("error", "timeout") else "") or ""
                if status == "error" and st.get("cause"):
                    notes[(str(st.get("fix") or ""), str(st.get("error") or ""))] = None
            t.add_row(
                label if i == 0 else "",
                (version or "no distribution") if i == 0 else "",
                Text(f"{mod}: {status}", style=style),
                Text(str(detail), style="red" if status == "error" else ""),
            )
    out: List[Any] = [_section("Attention libraries")]
    if t.row_count:
        out.append(_indent(t))
    for (fix, error) in notes:
        rows: List[Tuple[str, Any]] = []
        if fix:
            rows.append(("fix", Text(fix, style="bold")))
        if error:
            rows.append(("error", Text(error, style="dim")))
        out.append(_kv_table(rows))
    if absent:
        out.append(_line("not installed: " + ", ".join(absent), "dim"))
    return out


def _frameworks_part(doc: Mapping[str, Any]) -> List[Any]:
    packages = doc.get("packages")
    out: List[Any] = [_section("Frameworks")]
    if packages is None:
        out.append(_line("unknown: " + (_unknown(doc, "packages") or "not in the snapshot"), "yellow"))
        return out
    found = [(n, packages[n]) for n in FRAMEWORKS if n in packages]
    if found:
        out.append(_kv_table(found))
    else:
        out.append(_line("none of the known training frameworks is installed", "dim"))
    return out


def _contracts_part(doc: Mapping[str, Any]) -> List[Any]:
    """One line per analysed caller/callee pair; breaking sites listed (docs/contracts.md)."""
    section = doc.get("contracts")
    if not isinstance(section, Mapping) or not section.get("pairs"):
        return []
    out: List[Any] = [_section("Contracts (calls into other packages, read from the installed code)")]
    sites = section.get("sites") or []
    for p in section["pairs"]:
        head = f"{p['caller']} {p['caller_version']} -> {p['callee']} {p['callee_version']}: {p['sites']} site(s)"
        counts = [f"{p['breaks']} break" if p.get("breaks") else "",
                  f"{p['conditional']} break on some paths" if p.get("conditional") else "",
                  f"{p['undecided'] - (p.get('conditional') or 0)} undecided (see --format json)"
                  if (p.get("undecided") or 0) > (p.get("conditional") or 0) else ""]
        text = ", ".join(c for c in counts if c) or "all bind"
        style = "red" if p.get("breaks") else ("yellow" if p.get("undecided") else "green")
        out.append(_line(f"{head}, {text}" if text != "all bind" else f"{head}, all bind", style))
        grouped: Dict[Tuple[str, str], List[str]] = {}
        for row in sites:
            if row.get("pair") == p["id"] and (row.get("verdict") == "breaks" or row.get("conditional")):
                grouped.setdefault((row["symbol"], row["reason"]), []).append(row["site"])
        for (symbol, reason), where in grouped.items():
            out.append(_line(f"  {symbol}: {reason} (at {', '.join(where)})", style))
    return out


def _env_part(doc: Mapping[str, Any]) -> List[Any]:
    env = doc.get("env")
    out: List[Any] = [_section("Environment switches")]
    if env is None:
        out.append(_line("unknown: " + (_unknown(doc, "env") or "not in the snapshot"), "yellow"))
    elif not env:
        out.append(_line("none set", "dim"))
    else:
        out.append(_kv_table((k, _short(str(v))) for k, v in env.items()))
    return out


def _short(value: str, limit: int = 160) -> str:
    """Long values (NVIDIA_REQUIRE_CUDA lists dozens of driver ranges) are cut; JSON has them whole."""
    return value if len(value) <= limit else f"{value[:120]}… ({len(value)} characters; see --format json)"


def _unknown_part(doc: Mapping[str, Any]) -> List[Any]:
    unknown = doc.get("unknown") or {}
    if not unknown:
        return []
    rows = [(k, Text(str(v), style="yellow")) for k, v in unknown.items()]
    return [_section("Unknown facts (could not be probed)"), _kv_table(rows)]


def _header(doc: Mapping[str, Any]) -> Text:
    py = doc.get("python") or {}
    plat = doc.get("platform") or {}
    parts = [f"attn-doctor {doc.get('doctor_version', '')}".strip()]
    if doc.get("host"):
        parts.append(f"host {doc['host']}")
    if doc.get("created"):
        parts.append(str(doc["created"]))
    if py.get("version"):
        parts.append(f"Python {py['version']}")
    plat_text = " ".join(str(plat[k]) for k in ("os", "arch", "libc") if plat.get(k))
    if plat_text:
        parts.append(plat_text)
    return Text(" · ".join(parts), style="bold")


def render_probe(doc: Mapping[str, Any], *, color: bool = False, width: int = 100) -> str:
    """The snapshot as a readable report (doctor.report.render decides colour and width)."""
    use_color = color
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="standard" if use_color else None,
        force_terminal=use_color,
        no_color=not use_color,
        highlight=False,
        emoji=False,
    )
    parts: List[Any] = [_header(doc)]
    for section in (_gpu_part, _cuda_part, _attention_part, _frameworks_part, _contracts_part, _env_part, _unknown_part):
        parts.extend(section(doc))
    for part in parts:
        console.print(part)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
