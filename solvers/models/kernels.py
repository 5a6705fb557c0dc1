"""Hopper's warp-specialized GEMM CTA as CUTLASS sm90 builds it (warpgroups, threads, registers):
what the kernel questions share."""
from __future__ import annotations

CONSUMER_WARPGROUPS = 2  # Hopper's cooperative GEMM: two consumer warpgroups share the CTA tile along M


WARPGROUP_THREADS = 128


CONSUMER_REGISTERS = 232  # CUTLASS sm90's consumer budget under setmaxnreg (40 producer / 232 consumer)

