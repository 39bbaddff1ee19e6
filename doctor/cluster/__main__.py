"""`python -m doctor.cluster --out FILE.json`: the distributed check without the CLI.

Run it under a launcher (torchrun, srun). Every rank probes, runs its checks and sends its
results to rank 0, which writes the report as JSON to --out and a short summary to stdout.
The process exits with the report's code (0 clean, 1 error findings, 4 a rank did not answer);
other ranks exit 0 once their results are handed over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from doctor.cluster.cp_attention import SCHEMES, CpConfig
from doctor.cluster.gather import Timeouts
from doctor.cluster.run import ClusterOptions, run_distributed
from doctor.cluster.text import summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m doctor.cluster", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="rank 0 writes the JSON report here")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per stage (join, probe, each collective)")
    p.add_argument("--static", action="store_true", help="probe without the child that imports torch")
    p.add_argument("--no-kernels", action="store_true")
    p.add_argument("--no-comm", action="store_true")
    p.add_argument("--no-cp", action="store_true")
    p.add_argument("--comm-mib", type=int, default=None, help="all_reduce size (default 256 on GPUs)")
    p.add_argument("--cp-seq-len", type=int, default=None)
    p.add_argument("--cp-heads", type=int, default=None)
    p.add_argument("--cp-head-dim", type=int, default=None)
    p.add_argument("--cp-dtype", choices=("bf16", "fp16", "fp32"), default=None)
    p.add_argument("--cp-schemes", default=",".join(SCHEMES), help="comma-separated: all_gather,p2p")
    return p


def _cp_config(args: argparse.Namespace) -> Optional[CpConfig]:
    given = {
        "seq_len": args.cp_seq_len,
        "heads": args.cp_heads,
        "head_dim": args.cp_head_dim,
        "dtype": args.cp_dtype,
    }
    given = {k: v for k, v in given.items() if v is not None}
    schemes = tuple(s for s in args.cp_schemes.split(",") if s)
    if not given and schemes == SCHEMES:
        return None
    import torch

    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    base = CpConfig.for_device(torch.cuda.is_available(), world)
    return CpConfig(**{**base.__dict__, **given, "schemes": schemes})


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    options = ClusterOptions(
        loaded=not args.static,
        kernels=not args.no_kernels,
        comm=not args.no_comm,
        cp=not args.no_cp,
        timeouts=Timeouts.uniform(args.timeout),
        comm_bytes=args.comm_mib * 2**20 if args.comm_mib else None,
        cp_config=_cp_config(args),
    )
    from doctor.errors import DoctorError

    try:
        report = run_distributed(options)
    except DoctorError as exc:
        sys.stderr.write(f"attn-doctor: error: {exc.one_line()}\n")
        return int(exc.exit_code)
    if report.is_reporter:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(report.to_dict(), fh, indent=2, default=str)
                fh.write("\n")
        sys.stdout.write("\n".join(summary(report)) + "\n")
    elif report.notes:
        sys.stderr.write(f"attn-doctor rank {report.rank}: " + "; ".join(report.notes) + "\n")
    code = report.exit_code
    if report.hard_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
