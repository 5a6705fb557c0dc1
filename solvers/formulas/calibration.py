"""Quantization calibration for mixture-of-experts models: the router decides how many calibration tokens
each expert sees, and a Hessian-based quantizer (GPTQ) fed too few of them does worse than plain rounding.

The crossover comes from a small seeded simulation: GPTQ and round-to-nearest (RTN) on a 64-wide layer,
4-bit per-row weights, Gaussian activations whose covariance eigenvalues spread over one decade; error
taken in expectation over the activation distribution as the tokens per input dimension fall."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SIM_WIDTH = 64  # d_in of the simulated layer: GPTQ's column loop stays cheap


SIM_RATIOS = (0.25, 0.5, 1, 2, 3, 4, 6, 8, 16, 32, 64)  # calibration tokens / d_in


SIM_REPEATS = 4  # calibration draws averaged at each ratio


SIM_SPREAD = 1.0  # decades between the largest and smallest activation variance


BITS = 4


@dataclass(frozen=True)
class Curve:
    ratios: tuple[float, ...]
    error_ratio: tuple[float, ...]  # GPTQ output error / RTN output error, held out
    rtn_error: float  # RTN's relative output error, ||X(W − Q)ᵀ||² / ||XWᵀ||²
    crossover: float  # tokens / d_in where GPTQ's error equals RTN's (log-linear interpolation)
    seed: int

    def at(self, ratio: float) -> float:
        """The error ratio at tokens/d_in = ratio: interpolated in log(ratio), held flat past the grid."""
        logs = np.log(self.ratios)
        return float(np.interp(math.log(ratio), logs, self.error_ratio))


def population(seed: int, width: int):
    """The simulated layer: weights, the activation covariance's square root, the per-row 4-bit scale."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((width, width)))
    root = basis * np.sqrt(np.logspace(0, SIM_SPREAD, width))
    W = rng.standard_normal((width, width))
    scale = np.abs(W).max(axis=1) / (2 ** (BITS - 1) - 1)
    return rng, W, root, scale


def round_to_nearest(W: np.ndarray, scale: np.ndarray) -> np.ndarray:
    top = 2 ** (BITS - 1) - 1
    return np.clip(np.round(W / scale[:, None]), -top - 1, top) * scale[:, None]


def gptq(W: np.ndarray, H: np.ndarray, scale: np.ndarray, damping: float) -> np.ndarray:
    """GPTQ (Frantar et al. 2022, Algorithm 1 without blocking or act-order): quantize one input column at a
    time and push its error onto the columns not yet quantized through the Cholesky factor of H⁻¹, with
    λ = damping × mean(diag H) added to the diagonal first. H may be a stack [..., d, d] of Hessians: the
    same W is then quantized once per Hessian, all in one column loop."""
    width = W.shape[1]
    diag = np.diagonal(H, axis1=-2, axis2=-1)
    damped = H + damping * diag.mean(axis=-1)[..., None, None] * np.eye(width)
    upper = np.swapaxes(np.linalg.cholesky(np.linalg.inv(damped)), -1, -2)
    work = np.broadcast_to(W, H.shape[:-2] + W.shape).copy()
    Q = np.empty_like(work)
    top = 2 ** (BITS - 1) - 1
    for i in range(width):
        column = work[..., i]
        Q[..., i] = np.clip(np.round(column / scale), -top - 1, top) * scale
        error = (column - Q[..., i]) / upper[..., i, i][..., None]
        work[..., i + 1:] -= error[..., :, None] * upper[..., None, i, i + 1:]
    return Q


def calibration_hessian(rng: np.random.Generator, root: np.ndarray, n: int) -> np.ndarray:
    """H = 2XᵀX/n for n calibration tokens x = root·z, z standard normal. From n ≥ d tokens ZᵀZ is drawn by
    Bartlett's decomposition of the Wishart(n, I) matrix (same distribution, d² numbers instead of n·d);
    below d, from the tokens themselves (the rank-n case)."""
    width = root.shape[0]
    if n < width:
        Z = rng.standard_normal((n, width))
        gram = Z.T @ Z
    else:
        A = np.tril(rng.standard_normal((width, width)), -1)
        A[np.diag_indices(width)] = np.sqrt(rng.chisquare(n - np.arange(width)))
        gram = A @ A.T
    return 2 * root @ gram @ root.T / n


def relative_error(sigma: np.ndarray, W: np.ndarray, Q: np.ndarray) -> float:
    """E||x(W − Q)ᵀ||² / E||xWᵀ||² over activations x of covariance Σ: the held-out error, exactly."""
    D = W - Q
    return float(np.einsum("ij,jk,ik->", D, sigma, D) / np.einsum("ij,jk,ik->", W, sigma, W))


def sim_seed(damping: float) -> int:
    """The simulation's seed, from the one variant parameter it depends on."""
    return zlib.crc32(f"moe-calibration-starvation:{damping:g}".encode())


@lru_cache(maxsize=8)
def simulate(damping: float) -> Curve:
    seed = sim_seed(damping)
    rng, W, root, scale = population(seed, SIM_WIDTH)
    sigma = root @ root.T
    rtn = relative_error(sigma, W, round_to_nearest(W, scale))
    hessians = [calibration_hessian(rng, root, int(round(ratio * SIM_WIDTH)))
                for ratio in SIM_RATIOS for _ in range(SIM_REPEATS)]
    quantized = gptq(W, np.stack(hessians), scale, damping)
    errors = [relative_error(sigma, W, Q) / rtn for Q in quantized]
    ratios = [float(np.mean(errors[i:i + SIM_REPEATS])) for i in range(0, len(errors), SIM_REPEATS)]
    logs = np.log(SIM_RATIOS)
    # The last ratio at which GPTQ still loses, and the next: GPTQ wins from there on.
    last = max(i for i, r in enumerate(ratios) if r >= 1)
    a, b = ratios[last], ratios[last + 1]
    crossover = math.exp(logs[last] + (a - 1) / (a - b) * (logs[last + 1] - logs[last]))
    return Curve(SIM_RATIOS, tuple(ratios), rtn, crossover, seed)

