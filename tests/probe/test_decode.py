"""Decoding failed imports of compiled attention extensions into a cause and a fix."""

from __future__ import annotations

from doctor.probe.child import decode_cudnn_version
from doctor.probe.decode import TorchContext, diagnose

SO = "/venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so"
NEW_ABI_SYM = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
OLD_ABI_SYM = "_ZN3c105ErrorC2ENS_14SourceLocationESs"


def _err(symbol: str) -> str:
    return f"ImportError: {SO}: undefined symbol: {symbol}"


def test_new_abi_wheel_on_old_abi_torch() -> None:
    ctx = TorchContext(version="2.1.0+cu121", cuda="12.1", cxx11_abi=False, python_tag="cp310", package_version="2.3.4")
    d = diagnose("flash_attn_2_cuda", _err(NEW_ABI_SYM), ctx)
    assert d is not None
    assert d.cause == "C++ ABI mismatch (wheel built with cxx11abi=TRUE, torch uses FALSE)"
    assert "+cu122torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl" in d.fix
    assert "--no-build-isolation" in d.fix


def test_wheel_cuda_tag_follows_the_flash_attn_release() -> None:
    err = _err(NEW_ABI_SYM)
    for fa, tag in (("2.8.3", "cu12"), ("2.6.3", "cu123"), ("2.5.8", "cu122"), ("2.3.2", "cu121")):
        ctx = TorchContext(version="2.3.1+cu121", cuda="12.1", cxx11_abi=False, python_tag="cp310", package_version=fa)
        d = diagnose("flash_attn_2_cuda", err, ctx)
        assert d is not None and f"+{tag}torch2.3cxx11abiFALSE" in d.fix, (fa, d.fix)
    ctx = TorchContext(version="2.3.1+cu118", cuda="11.8", cxx11_abi=False, package_version="2.5.8")
    d = diagnose("flash_attn_2_cuda", err, ctx)
    assert d is not None and "+cu118torch2.3" in d.fix


def test_old_abi_wheel_on_new_abi_torch() -> None:
    ctx = TorchContext(version="2.7.1+cu126", cuda="12.6", cxx11_abi=True, python_tag="cp311", package_version="2.8.3")
    d = diagnose("flash_attn_2_cuda", _err(OLD_ABI_SYM), ctx)
    assert d is not None
    assert d.cause == "C++ ABI mismatch (wheel built with cxx11abi=FALSE, torch uses TRUE)"
    assert "+cu12torch2.7cxx11abiTRUE-cp311" in d.fix


def test_torch_version_mismatch() -> None:
    ctx = TorchContext(version="2.3.0+cu121", cuda="12.1", cxx11_abi=False, package_version="2.5.7")
    d = diagnose("flash_attn_2_cuda", _err("_ZN3c104cuda9SetDeviceEi"), ctx)
    assert d is not None
    assert d.cause.startswith("flash-attn wheel built for a different torch version")
    assert "torch 2.3" in d.fix and "flash-attn==2.5.7" in d.fix


def test_new_abi_symbol_with_new_abi_torch_means_torch_version() -> None:
    ctx = TorchContext(version="2.8.0+cu128", cuda="12.8", cxx11_abi=True)
    d = diagnose("flash_attn_2_cuda", _err(NEW_ABI_SYM), ctx)
    assert d is not None and "different torch version" in d.cause


def test_unknown_torch_abi_says_both_possibilities() -> None:
    d = diagnose("flash_attn_2_cuda", _err(NEW_ABI_SYM), TorchContext())
    assert d is not None and "C++ ABI mismatch" in d.cause and "different torch version" in d.cause


def test_cuda_runtime_mismatch_from_missing_library() -> None:
    msg = "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory"
    d = diagnose("flash_attn_2_cuda", msg, TorchContext(version="2.4.0+cu121", cuda="12.1", cxx11_abi=False))
    assert d is not None
    assert d.cause.startswith("CUDA runtime mismatch: flash-attn was built for CUDA 11")
    assert "torch uses CUDA 12.1" in d.cause


def test_cuda_symbol_in_extension() -> None:
    d = diagnose("transformer_engine.pytorch", _err("cudaGetDriverEntryPointByVersion"), TorchContext(cuda="12.1"))
    assert d is not None and d.cause.startswith("CUDA runtime mismatch")
    assert "transformer_engine[pytorch]" in d.fix


def test_torch_itself_with_shadowing_libraries() -> None:
    msg = "/site/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommRegister"
    d = diagnose("torch", msg, TorchContext())
    assert d is not None and "LD_LIBRARY_PATH" in d.fix


def test_extension_needs_cuda_torch() -> None:
    msg = "ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory"
    d = diagnose("xformers", msg, TorchContext(version="2.4.0+cpu"))
    assert d is not None and "CPU-only build" in d.cause


def test_old_libstdcxx() -> None:
    msg = "/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found"
    d = diagnose("flash_attn_2_cuda", msg, TorchContext())
    assert d is not None and "GLIBCXX_3.4.32" in d.cause


def test_unrecognised_errors_get_no_invented_cause() -> None:
    assert diagnose("flash_attn", "RuntimeError: something else entirely", TorchContext()) is None


def test_cudnn_version_decoding() -> None:
    assert decode_cudnn_version(90100) == "9.1.0"
    assert decode_cudnn_version(91002) == "9.10.2"
    assert decode_cudnn_version(92000) == "9.20.0"
    assert decode_cudnn_version(8902) == "8.9.2"
    assert decode_cudnn_version(7605) == "7.6.5"
    assert decode_cudnn_version(None) is None
