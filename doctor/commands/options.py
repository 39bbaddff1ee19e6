"""Workload flags shared by `check` and `fix`: every workload-file key is also a flag (the
`distributed` key's is `--strategy`, as `--distributed` runs check on every rank).

    --head-dim 192 --head-dim-v 128 --mask causal --dtype bf16 --cp-size 2 --cp-comm-type all_gather
    --strategy fsdp
    --qkv-packed / --no-qkv-packed, --inference (training off), --window-size 4095,0

typer hands us the arguments it does not know; this parser turns them into workload keys and
rejects anything else with the list of known flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from doctor.errors import InputError
from doctor.model import DISTRIBUTED
from doctor.workload import BOOL_KEYS, FLAG_NAMES, KEYS

if TYPE_CHECKING:
    from doctor.app import CheckOptions

# the flag names, and the workload key itself where the command has no option of that name
# (`fix --distributed fsdp` keeps working: fix has no --distributed of its own)
KEY_OF_FLAG = {**{flag: key for key, flag in FLAG_NAMES.items()}, **{key: key for key in FLAG_NAMES}}
FLAG_KEYS = tuple(FLAG_NAMES.get(k, k) for k in KEYS if k != "context_parallel") + ("cp_size", "cp_comm_type", "cp_impl", "cp_attn_implementation")

WORKLOAD_FLAGS_HELP = (
    "Workload flags (override --workload/--model): "
    + " ".join("--" + k.replace("_", "-") for k in FLAG_KEYS)
    + " --inference. Booleans take no value; prefix --no- to turn one off."
)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_workload_flags(args: Sequence[str], command: str = "check") -> Dict[str, Any]:
    help_hint = f"see `attn-doctor {command} --help` for the workload flags"
    out: Dict[str, Any] = {}
    cp: Dict[str, Any] = {}
    rest: List[str] = list(args)
    i = 0
    while i < len(rest):
        arg = rest[i]
        if not arg.startswith("--"):
            if arg in DISTRIBUTED and command == "check":  # `--distributed fsdp`: typer took --distributed as check's own flag
                raise InputError(f"unexpected argument {arg!r}", hint=f"--distributed runs {command} on every rank; the workload's strategy is --strategy {arg}")
            raise InputError(f"unexpected argument {arg!r}", hint=f"see `attn-doctor {command} --help`")
        name, eq, inline = arg[2:].partition("=")
        key = name.replace("-", "_")
        negate = False
        if key.startswith("no_") and key[3:] in BOOL_KEYS:
            key, negate = key[3:], True
        if key in ("inference", "no_inference"):
            if eq:
                raise InputError(f"{arg}: --inference takes no value (use --inference or --training)")
            out["training"] = key == "no_inference"
            i += 1
            continue
        if key not in FLAG_KEYS and key not in KEY_OF_FLAG:
            import difflib

            close = difflib.get_close_matches(key, FLAG_KEYS + ("inference",), n=1)
            guess = f"did you mean --{close[0].replace('_', '-')}? " if close else ""
            raise InputError(f"no such option: {arg}", hint=guess + help_hint)
        if key in BOOL_KEYS:
            if eq and (negate or inline.lower() not in _TRUE + _FALSE):
                raise InputError(
                    f"{arg}: expected --{name} (on), --{name}=true or --{name}=false",
                    hint=f"--no-{key.replace('_', '-')} turns it off",
                )
            out[key] = (inline.lower() in _TRUE) if eq else not negate
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        else:
            if i + 1 >= len(rest):
                raise InputError(f"option {arg} needs a value")
            value = rest[i + 1]
            i += 2
        if key == "window_size":
            parts = value.replace(" ", "").split(",")
            if len(parts) != 2:
                raise InputError(f"--window-size {value!r}: expected LEFT,RIGHT (e.g. 4095,0)")
            out[key] = parts
        elif key == "cp_size":
            cp["size"] = value
        elif key == "cp_comm_type":
            cp["comm_type"] = value
        elif key == "cp_impl":
            cp["impl"] = value
        elif key == "cp_attn_implementation":
            cp["attn_implementation"] = value
        else:
            out[KEY_OF_FLAG.get(key, key)] = value
    if cp:
        out["context_parallel"] = cp
    return out


def check_options(
    *,
    env: Sequence[Path],
    workload: Optional[Path],
    model: Optional[Path],
    extra_args: Sequence[str],
    assume: Optional[Sequence[str]],
    assume_env: Optional[Sequence[str]],
    rules_dir: Optional[Sequence[Path]],
    static: bool,
    command: str = "check",
    **more: Any,
) -> "CheckOptions":
    """The options `check` and `fix` share, from their flags (workload flags parsed here)."""
    from doctor.app import CheckOptions, ProbeOptions

    return CheckOptions(
        env_files=tuple(env),
        workload_file=workload,
        model=model,
        workload_flags=parse_workload_flags(extra_args, command),
        assume=tuple(assume or ()),
        assume_env=tuple(assume_env or ()),
        rules_dirs=tuple(rules_dir or ()),
        probe=ProbeOptions(static=static),  # the torch-importing child is cached for an hour
        **more,
    )
