"""The script the loaded-facts child process runs (never imported by attn-doctor itself).

`doctor/probe/child.py` passes this file's text to `python -c` together with the module
names to try, so it needs nothing from attn-doctor and runs under whichever interpreter owns
the torch install. It prints one JSON line per finished step, each prefixed with MARKER and
flushed at once, so a timeout or a crash part-way still leaves the steps that finished.
"""

import json
import sys
import time

MARKER = "@@attn-doctor@@ "


def emit(record):
    sys.stdout.write(MARKER + json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def error_text(exc):
    text = "%s: %s" % (type(exc).__name__, exc)
    return text[:2000]


def mapped_libraries(prefix):
    """Distinct files mapped into this process whose name starts with `prefix` (/proc/self/maps)."""
    found = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                name = path.rsplit("/", 1)[-1]
                if name.startswith(prefix) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def loaded_library(prefix):
    libs = mapped_libraries(prefix)
    return libs[0] if libs else None


def symbol_file(fn):
    """The shared object that defines the ctypes function `fn` (dladdr)."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [
            ("dli_fname", ctypes.c_char_p),
            ("dli_fbase", ctypes.c_void_p),
            ("dli_sname", ctypes.c_char_p),
            ("dli_saddr", ctypes.c_void_p),
        ]

    info = DlInfo()
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    if dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
        return info.dli_fname.decode("utf-8", "replace")
    return None


def cudnn_in_use():
    """Version and file of the cudnnGetVersion torch binds to.

    Two libcudnn.so.9 files can be mapped at once (LD_PRELOAD or LD_LIBRARY_PATH plus the
    wheel torch preloads); the one whose symbols win is found in the global scope first, then
    in libtorch_cuda's own dependency scope.
    """
    import ctypes

    torch_cuda = loaded_library("libtorch_cuda.so")
    for lib in [None] + ([torch_cuda] if torch_cuda else []):
        try:
            fn = ctypes.CDLL(lib).cudnnGetVersion
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_size_t
        return {"version": int(fn()), "path": symbol_file(fn)}
    return None


def attempt(fn):
    try:
        return {"value": fn()}
    except BaseException as exc:  # noqa: B902 - report everything, including SystemExit
        return {"error": error_text(exc)}


def torch_facts(torch):
    facts = {
        "version": attempt(lambda: str(torch.__version__)),
        "cuda": attempt(lambda: torch.version.cuda),
        "hip": attempt(lambda: getattr(torch.version, "hip", None)),
        "git_version": attempt(lambda: getattr(torch.version, "git_version", None)),
        "cxx11_abi": attempt(lambda: bool(torch._C._GLIBCXX_USE_CXX11_ABI)),
        "cudnn_version_int": attempt(lambda: torch.backends.cudnn.version()),
    }
    # after torch.backends.cudnn.version() loaded it (or refused it): which file, which version
    # cuDNN 9 is a small libcudnn.so.9 that dlopens libcudnn_graph/ops/engines_*.so.9 by name,
    # so the parts can come from different folders: report every part
    facts["cudnn_mapped"] = {"value": mapped_libraries("libcudnn")}
    facts["cudnn_in_use"] = attempt(cudnn_in_use)
    facts["cudart_path"] = {"value": loaded_library("libcudart.so")}
    return facts


def cuda_facts(torch):
    return {
        "cuda_available": attempt(lambda: bool(torch.cuda.is_available())),
        "device_count": attempt(lambda: int(torch.cuda.device_count())),
        "arch_list": attempt(lambda: list(torch.cuda.get_arch_list())),
    }


def try_import(name):
    start = time.time()
    try:
        __import__(name)
    except ModuleNotFoundError as exc:
        missing = getattr(exc, "name", None) or ""
        status = "missing" if missing and (name == missing or name.startswith(missing + ".")) else "error"
        return {"status": status, "error": error_text(exc), "seconds": round(time.time() - start, 3)}
    except BaseException as exc:  # noqa: B902
        return {"status": "error", "error": error_text(exc), "seconds": round(time.time() - start, 3)}
    return {"status": "ok", "seconds": round(time.time() - start, 3)}


def main(names):
    emit({"step": "start", "python": sys.version.split()[0], "executable": sys.executable})
    emit({"step": "begin", "name": "torch"})
    start = time.time()
    try:
        import torch
    except BaseException as exc:  # noqa: B902
        emit({"step": "torch_import", "status": "error", "error": error_text(exc)})
        emit({"step": "done"})
        return
    emit({"step": "torch_import", "status": "ok", "seconds": round(time.time() - start, 3)})
    emit({"step": "torch", "facts": torch_facts(torch)})
    for name in names:
        emit({"step": "begin", "name": name})
        emit({"step": "import", "name": name, "result": try_import(name)})
    # after the imports: on a wedged GPU these are the calls that can hang
    emit({"step": "begin", "name": "cuda"})
    emit({"step": "cuda", "facts": cuda_facts(torch)})
    emit({"step": "done"})


main(sys.argv[1:])
