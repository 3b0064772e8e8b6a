"""Glue between the dashboard pages and vqlc_core: cached loaders (`loaders`), the widgets the
pages share (`widgets`: guard, sidebar, selectors, input text, rebuild and pin buttons), the
views several pages show (`views`) and each view's state in its link (`share`, kept by the sidebar
and the views). Pages call `vqlc_ui.<name>`; the logic lives in vqlc_core.

Runs live under `$VQLC_CACHE_DIR/runs/` (default `cache/runs/`).
"""

import logging

import streamlit.runtime.caching.cache_data_api as _cache_data_api

# Imported outside a server (`python -m vqlc_ui.serve` before it starts, tests), Streamlit checks
# each cache decorator against a runtime that does not exist yet and logs a warning per decorator;
# harmless (a cache is bound to the server's runtime when first called), so kept quiet here.
_quiet = logging.getLogger(_cache_data_api.__name__)
_level = _quiet.level
_quiet.setLevel(logging.ERROR)
try:
    from .loaders import (ablate, cache_dir, cloud, concept_map, concepts, corpus_figures, evaluation, explain, explainer,
                          instruments, load_run, map_figure,
                          prediction_members, stamp, texts, tokens, warm_up)
    from .escape import plain
    from .views import ablation_panel, colored_sentence, concept_picture, concept_view
    from .explanation import (additive_view, contributions, options, prediction_panel, ranked_list, sentence,
                              word_contexts)
    from .widgets import (EXAMPLE, app_navigation, build_messages, explained_text, guard, persisted, pin_button, rebuild_button, sidebar, text_input, text_key,
                          well_formed_typing)
finally:
    _quiet.setLevel(_level)

__all__ = ["EXAMPLE", "ablate", "app_navigation", "build_messages", "ablation_panel", "cache_dir", "cloud", "colored_sentence", "contributions",
           "concept_map", "corpus_figures", "additive_view", "options", "prediction_panel", "ranked_list", "sentence", "word_contexts", "concept_picture", "concept_view", "concepts", "evaluation", "explain", "explained_text",
           "explainer", "guard", "instruments",
           "load_run", "map_figure", "persisted", "pin_button", "plain", "prediction_members", "rebuild_button",
           "sidebar", "stamp", "text_input", "text_key", "texts", "tokens", "warm_up", "well_formed_typing"]
