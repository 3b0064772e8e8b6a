"""vqlc_core: fine-tune a language model for its task, extract the token states of one layer,
discover concepts in them with VQLC, K-Means, LACOAT and an SAE, explain and ablate
predictions with those concepts, and measure how faithful the explanations are.

The public API, for a notebook (docs/guides/notebooks.md shows it at work):

    import vqlc_core as vq
    run = vq.open_run("default")                 # a built run, by name or path
    ex = run.explainer(methods=("vqlc",)).explain("a gorgeous, witty film")
    ex.prediction, ex.methods["vqlc"].prediction_concepts[0].label
    run.concepts("vqlc").summary                 # a ConceptSet: sizes, top words, purity
    vq.VQLC(n_concepts=400).fit(X).predict(X)    # the estimators also take an (N, d) array

The package is layered, lowest first: base, data, methods, explain, evaluate, llm, views, pipeline
(a module imports only its own layer and the ones below it).
"""

import importlib

# Each public name and the module it lives in: a name is imported when first used (PEP 562, as
# scikit-learn's root does), so `import vqlc_core` loads no torch, scikit-learn or plotly.
_HOMES = {
    "CorruptStage": "base.runio", "RunError": "base.runio",
    "PRESETS": "pipeline.config", "BuildConfig": "pipeline.config", "preset": "pipeline.config",
    "build": "pipeline.build",
    "Run": "pipeline.run", "list_runs": "pipeline.run", "open_run": "pipeline.run",
    "Backbone": "data.backbone", "capture": "data.backbone",
    "ablate": "explain.ablation",
    "Explainer": "explain.explainer",
    "Explanation": "explain.records", "MethodExplanation": "explain.records", "Ablation": "explain.records",
    "ConceptMethod": "methods.base", "display_name": "methods.base",
    "REGISTRY": "methods.registry", "method_class": "methods.registry", "method_names": "methods.registry",
    "ConceptSet": "methods.concepts", "Concept": "methods.records", "concepts_of": "methods.arrays",
    "KMeansConcepts": "methods.kmeans", "LACOAT": "methods.lacoat", "SAEConcepts": "methods.sae", "VQLC": "methods.vqlc",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'vqlc_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"vqlc_core.{home}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__version__ = "0.2.0"

__all__ = sorted(_HOMES) + ["__version__"]
