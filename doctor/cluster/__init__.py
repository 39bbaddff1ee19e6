"""The distributed check: the same doctor on every rank of a job, one report from rank 0.

    launch.py        which rank this is (torchrun / Slurm / any launcher's environment)
    gather.py        join with timeouts, agree on each phase, gather results to rank 0
    hetero.py        facts that differ between ranks or snapshots -> findings (pure)
    comm.py          all_reduce / all_gather smoke test with checked values and bandwidth
    cp_attention.py  context-parallel attention (all-gather and p2p ring) vs a float64 reference
    assemble.py      rank 0's payloads -> rows and findings (pure)
    report.py        the frozen ClusterReport and its parts
    run.py           run_distributed(options) -> ClusterReport, the per-rank entry

Entry points for the CLI: `doctor.cluster.run.run_distributed` (`check --distributed`) and
`doctor.cluster.hetero.analyze` (`check --env a.json --env b.json`). torch is imported only
inside the functions that need it. `python -m doctor.cluster --out FILE.json` runs the check
under a launcher without the CLI (docs/cluster.md).
"""
