"""The time side: a GPU cluster (nodes, scale-up domain, NICs, fabric), NCCL's cost model as data,
transport loss recovery, step time from communication logs, and the FEC trade-off.

Modules: :mod:`.topology` (the cluster and presets), :mod:`.nccl` (NCCL's cost structure,
``nccl_tuning.json``), :mod:`.ncclfile` (nccl-tests output: reader, comparison, calibration),
:mod:`.transport` (loss recovery simulated), :mod:`.steptime`, :mod:`.tradeoff`, and
:mod:`.flat` (the earlier flat alpha-beta model, ``--cluster flat-ethernet``).
"""

__all__ = ["topology", "nccl", "ncclfile", "transport", "steptime", "tradeoff", "flat"]
