"""vqlc_core: extract token states from a frozen language model, discover concepts with VQLC,
K-Means and LACOAT, explain and ablate predictions, and precompute what the dashboard shows."""

__version__ = "0.1.0"
