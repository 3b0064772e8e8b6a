"""vqlc_core: fine-tune a language model for its task, extract the token states of one layer,
discover concepts in them with VQLC, K-Means, LACOAT and an SAE, explain and ablate
predictions with those concepts, and measure how faithful the explanations are.

The public API, for a notebook (the README's "From Python" runs it in the tests):

    import vqlc_core as vq
    run = vq.open_run("default")                 # a built run, by name or path
    ex = run.explainer(methods=("vqlc",)).explain("a gorgeous, witty film")
    ex.prediction, ex.methods["vqlc"]["prediction_concepts"][0]
    run.concepts("vqlc").summary                 # a ConceptSet: sizes, top words, purity
    vq.VQLC(n_concepts=400).fit(X).predict(X)    # the estimators also take an (N, d) array

The package is layered, lowest first: base, data, methods, explain, evaluate, llm, views, build
(a module imports only its own layer and the ones below it).
"""

from vqlc_core.base.runio import CorruptStage, RunError
from vqlc_core.build.config import PRESETS, BuildConfig, preset
from vqlc_core.build.pipeline import build
from vqlc_core.build.run import Run, list_runs, open_run
from vqlc_core.data.backbone import Backbone, capture
from vqlc_core.explain.ablation import ablate
from vqlc_core.explain.explainer import Explainer, Explanation
from vqlc_core.methods.base import REGISTRY, ConceptMethod, display_name, method_class, method_names
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.methods.lacoat import LACOAT
from vqlc_core.methods.sae import SAEConcepts
from vqlc_core.methods.vqlc import VQLC

__version__ = "0.2.0"

__all__ = [
    "LACOAT", "PRESETS", "REGISTRY", "VQLC", "Backbone", "BuildConfig", "ConceptMethod", "ConceptSet", "CorruptStage",
    "Explainer", "Explanation", "KMeansConcepts", "Run", "SAEConcepts", "RunError", "ablate", "build", "capture", "display_name", "list_runs", "method_class",
    "method_names", "open_run", "preset", "__version__",
]
