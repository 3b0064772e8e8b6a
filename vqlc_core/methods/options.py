"""The built-in methods' build options, each a small dataclass (`ConceptMethod.Options`), kept
apart from the estimators so the build's settings and the command line read them without
importing torch: `registry.method_options` finds them here until a method's class is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from vqlc_core.base.options import at_least, one_of, opt

# Named settings of VQLC (`vqlc build --vqlc-variant NAME`). "paper" is the method as the paper
# describes it: farthest-first initialisation, dead codes re-seeded with the largest-error rows,
# no penalty beyond reconstruction and commitment, trained for at least 1,000 steps (the centring
# and one global scale of center_rms move and scale the space as a whole, so nearest codes and
# farthest-first are as on the raw states). On the paper's settings farthest-first spends every
# code on the periphery, the mean-pooled prediction rows in the dense centre share one or two
# codes, and largest-error re-seeding only ever adds codes further out (bench/vqlc_settings.py).
# "long" starts from k-means++ seeds and trains until under 1 in 100 of a probe of fit rows change
# concept in 40 steps (at most 1,000 steps): the default until the k-means start. "default" starts
# the codes from a short k-means of 4,096 fit rows' encodings (as SoundStream and VQGAN-LC
# initialise their codebooks) and refines them for one pass and at least 20 steps: on the default
# run's fit set its word concepts' dev R² was 0.3759 against 0.3788 for at least 50 steps and
# 0.3877 for "long", its fit (word and prediction concepts) 6.9 s against 8.7 s and 67.6 s, and
# K-Means' 10.0 s, one thread each beside other work, median of 3 (bench/vqlc_speed.py).
VARIANTS: dict[str, dict] = {
    "paper": {"init": "farthest_first", "reseed": "largest_error", "normalize": "center_rms", "ortho_weight": 0.0,
              "stop_tol": 0.0, "init_sample": 10000, "min_steps": 1000},
    "long": {"init": "kmeans++", "reseed": "random", "normalize": "center_row", "ortho_weight": 0.0,
             "stop_tol": 0.01, "init_sample": 10000, "min_steps": 1000},
    "default": {"init": "kmeans", "reseed": "random", "normalize": "center_row", "ortho_weight": 0.0,
                "stop_tol": 0.01, "init_sample": 4096, "min_steps": 20},
}
DEFAULT_VARIANT = VARIANTS["default"]  # `VQLC()`'s own defaults, so a bare estimator is the default build's

BETA = 0.25  # the commitment weight, as in VQ-VAE and the paper


@dataclass
class VQLCOptions:
    """VQLC's build options (`vqlc_<field>` in the build's settings)."""

    flag_prefix = "vqlc"  # the method's name (`ConceptMethod` sets it too, once the class is imported)

    beta: float = opt(BETA, "VQLC commitment weight beta", flag="--beta")
    epochs: int | None = opt(None, "VQLC training epochs, every step trained (default: the variant's schedule; "
                                   "'default': one pass and at least 20 steps after a k-means start)", flag="--epochs")
    fit_on: str = opt("fitset", "VQLC trains on the shared fit set or on all train rows", flag="--fit-on",
                      choices=("fitset", "all"))
    variant: str = opt("default", "VQLC's settings: default (codes started from a short k-means of 4,096 fit rows, "
                                  "one pass and at least 20 steps, dead codes re-seeded from random batch rows, rows "
                                  "normalised to one norm; chosen by measurement, see docs/design.md), long (k-means++ "
                                  "seeds, up to 1,000 steps until concepts stop changing) or paper (farthest-first "
                                  "initialisation, largest-error re-seeding, 1,000 steps)", flag="--vqlc-variant",
                       choices=tuple(VARIANTS))

    def __post_init__(self):
        at_least(self, "epochs", 1)
        one_of(self, "fit_on", ("fitset", "all"))
        one_of(self, "variant", tuple(VARIANTS))


LATENTS, K = 4096, 32  # the SAE's default width and active latents per row


@dataclass
class SAEOptions:
    """The SAE's build options (`sae_<field>` in the build's settings)."""

    flag_prefix = "sae"  # the method's name (`ConceptMethod` sets it too, once the class is imported)

    latents: int = opt(LATENTS, "SAE: number of latents, its concepts (K does not apply to it)")
    k: int = opt(K, "SAE: active latents per row (TopK)")

    def __post_init__(self):
        at_least(self, "k", 1)
        at_least(self, "latents", self.k + 1)
