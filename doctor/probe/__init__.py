"""Probe stage: what is installed and loaded on this machine, as a snapshot document.

    collect(loaded=True, *, sources=None) -> dict     the snapshot (docs/snapshot.md)
    Sources                                           every side effect, injectable

One module per fact source: packages (dist-info), torch_build (torch/version.py), cuda_libs
and cudnn (libraries on disk and which one torch loads), gpus (NVML / nvidia-smi), envvars
(redacted environment), hostinfo, child (+ child_script, decode, cache) for loaded facts.
"""

from doctor.probe.collect import collect
from doctor.probe.sources import RunResult, Sources, run_command

__all__ = ["collect", "Sources", "RunResult", "run_command"]
