"""Ridge regression in closed form (float64): the predictor of the learned critic (prefix values)
and of the prompt critic (prompt success), predictions clipped to [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Ridge:
    """y ≈ b + z·w with w = argmin ‖y − b − Zw‖² + λ‖w‖², the intercept b unpenalized.

    ``standardize=True`` (the learned critic): z = (x − μ)/σ with the training rows' mean and
    population SD (σ ≥ 1e-6), b = ȳ. ``standardize=False`` (the prompt critic): z = x, w fit on
    centred x and y, b = ȳ − x̄·w, solved in the primal (d×d) or dual (n×n) form, whichever is
    smaller."""

    weight: torch.Tensor
    bias: float | torch.Tensor
    mean: torch.Tensor | None = None  # standardized features only
    scale: torch.Tensor | None = None

    @classmethod
    def fit(cls, x: torch.Tensor, y: torch.Tensor, lam: float, *, standardize: bool) -> "Ridge":
        x, y = x.double(), y.double()
        if standardize:
            mean, scale = x.mean(0), x.std(0, correction=0).clamp(min=1e-6)
            z = (x - mean) / scale
            bias = float(y.mean())
            a = z.T @ z + lam * torch.eye(z.shape[1], dtype=z.dtype)
            return cls(torch.linalg.solve(a, z.T @ (y - bias)), bias, mean, scale)
        mx, my = x.mean(0), y.mean()
        xc, yc = x - mx, y - my
        n, d = xc.shape
        if d <= n:
            w = torch.linalg.solve(xc.T @ xc + lam * torch.eye(d, dtype=xc.dtype), xc.T @ yc)
        else:
            w = xc.T @ torch.linalg.solve(xc @ xc.T + lam * torch.eye(n, dtype=xc.dtype), yc)
        return cls(w, my - mx @ w)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted success in [0, 1] (float64)."""
        z = x.double() if self.mean is None else (x.double() - self.mean) / self.scale
        return (z @ self.weight + self.bias).clamp(0.0, 1.0)
