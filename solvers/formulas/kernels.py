"""Hopper's warp-specialized GEMM CTA as CUTLASS sm90 builds it (warpgroups, threads, registers):
what the kernel questions share."""
from __future__ import annotations

CONSUMER_WARPGROUPS = 2  # Hopper's cooperative GEMM: two consumer warpgroups share the CTA tile along M


WARPGROUP_THREADS = 128

