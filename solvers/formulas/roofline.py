"""What the roofline questions share: the XGMI ring a TP group needs, and the order regimes break ties in."""
from __future__ import annotations

from solvers.derivation import Reject


def require_full_xgmi_ring(gpu, tp: int) -> None:
    """The all-reduce model takes half the link aggregate; an xGMI mesh gives each GPU one link per peer,
    so only a ring over all eight MI300X reaches it (as the scheduling questions rule)."""
    if gpu.get("vendor") == "AMD" and 1 < tp < 8:
        raise Reject(f"{gpu.name} reaches half its xGMI aggregate only in a ring over all eight GPUs")


_REGIMES = ("compute", "bandwidth", "capacity")  # tie order: the simpler explanation first

