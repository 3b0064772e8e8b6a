"""The explainer's settings that the build's settings also name, apart from the code that uses
them: the command line reads them without importing torch."""

from __future__ import annotations

# Gauss-Legendre nodes of Integrated Gradients. From the train rows' mean state, 16 leave a
# completeness error under 0.01% on MiniLM (50 MR test sentences; 8 nodes: 0.15%) at a p95
# under 300 ms for 40 words (`attribution`'s docstring has the measurements).
IG_STEPS = 16
