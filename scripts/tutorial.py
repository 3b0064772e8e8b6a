"""The tutorial, executed: run its cells on a built run, as a notebook would, and write
docs/tutorial.md (the site's page, each cell with its output and figure) and docs/tutorial.ipynb
(the same notebook with its outputs, to open in Jupyter).

Usage: python scripts/tutorial.py                    run it on the run named `default`, write both
       python scripts/tutorial.py --run NAME         another run under $VQLC_CACHE_DIR
       python scripts/tutorial.py --out DIR          write into DIR instead of docs/
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TEXT = "a gorgeous, witty and deeply moving film"

# The notebook: ("md", text) and ("code", source) cells, in order. `RUN` is replaced by the run's name.
CELLS = [
    ("md", """# Tutorial: a run in a notebook

This page is a notebook, run by `python scripts/tutorial.py --run RUN` on a built run of MiniLM
fine-tuned on movie-review polarity, with the outputs it printed (a run of your own gives its own
figures); the test suite runs the same cells on a small run. Download it as
[tutorial.ipynb](tutorial.ipynb) and open it with the `.venv` kernel ([from a
notebook](guides/notebooks.md) says how). Every name is in the [Python API](reference/api.md).

## Open a run

`open_run` finds a run by its name under `$VQLC_CACHE_DIR` (default `./cache`); nothing heavy is
loaded until it is used."""),
    ("code", """import vqlc_core as vq

run = vq.open_run("RUN")
run.methods_built(), run.class_names, run.layer"""),
    ("md", """## Explain a sentence

An explainer holds the run's model and the concept sets of its methods. `explain` gives the
prediction and, for each method, the concepts of the input's words, each scored by its own
ablation: how much the predicted class's probability drops when that concept alone is removed
from the layer where its words are (`intervention="global"` removes it at every position, as the
faithfulness tables do). `base + sum of the scores + (joint - sum of the scores)` is the
prediction: the Explain page draws it as a waterfall."""),
    ("code", f"""explainer = run.explainer()
ex = explainer.explain("{TEXT}")
ex.prediction, round(ex.confidence, 3)"""),
    ("code", """vqlc = ex.methods["vqlc"]
for c in vqlc.contributions[:5]:
    words = [ex.words[i].word for i in c.words]
    print(f"{c.score:+.3f}  {c.label}  {words}")"""),
    ("md", """## Ablate a concept

`ablate` removes concepts from the layer (where their words are) and runs the rest of the model:
what the Explain page's toggles do. `delta` is the new minus the old probability of the predicted class."""),
    ("code", """top = vqlc.contributions[0]
after = explainer.ablate(ex.text, "vqlc", [top.concept])
after.prediction, round(after.delta, 3)"""),
    ("md", """## Compare the methods

Each method found its own concepts; here is the one each ranks first for this sentence."""),
    ("code", """for name, m in ex.methods.items():
    best = m.contributions[0]
    print(f"{vq.display_name(name):8} {best.score:+.3f}  {best.label}")"""),
    ("md", """## Read a concept's members

`run.concepts(method)` is the method's `ConceptSet`; `concept(k)` is one concept as a record: its
label, its train members' words and classes, and sampled members in their sentences."""),
    ("code", """concept = run.concepts("vqlc").concept(top.concept)
print(concept.label, "|", concept.size, "train members, purity", round(concept.purity, 2))
print("top words:", concept.top_words[:8])
texts = run.texts.set_index("text_id")["text"]
for text_id, word_index in concept.examples[:3]:
    print("-", texts[text_id][:100])"""),
    ("md", """## A figure

The scores of the sentence's VQLC concepts, as the Explain page ranks them."""),
    ("code", """import matplotlib.pyplot as plt

shown = vqlc.contributions[:8][::-1]
fig, ax = plt.subplots(figsize=(7, 3))
ax.barh([c.label[:45] for c in shown], [c.score for c in shown])
ax.set_xlabel(f"drop in p({ex.prediction}) with the concept removed")
fig.tight_layout()"""),
]


def cells(run: str) -> list[tuple[str, str]]:
    return [(kind, text.replace("RUN", run)) for kind, text in CELLS]


def execute(source: str, namespace: dict) -> dict:
    """Run one code cell as Jupyter does: its printed text, the value of its last expression, and
    the matplotlib figures it left open (PNG bytes, closed after)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, "<cell>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None
    figures = []
    for n in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(n).savefig(buf, format="png", dpi=100)
        figures.append(buf.getvalue())
    plt.close("all")
    return {"stdout": out.getvalue(), "result": None if value is None or last is None or _is_figure_call(last)
            else repr(value), "figures": figures}


def _is_figure_call(node: ast.Expr) -> bool:
    """A last line such as `fig.tight_layout()` shows its figure, not its return value."""
    return isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
        and node.value.func.attr in ("tight_layout", "show", "savefig")


def run_notebook(run: str) -> list[dict]:
    """Every cell with its outputs (code cells executed in one namespace, in order)."""
    namespace: dict = {"__name__": "__main__"}
    done = []
    for kind, text in cells(run):
        done.append({"kind": kind, "text": text, **(execute(text, namespace) if kind == "code" else {})})
    return done


def markdown(done: list[dict], figure_dir: str) -> tuple[str, dict[str, bytes]]:
    """The site's page and its figure files (name -> PNG bytes)."""
    lines = ["<!-- generated by `python scripts/tutorial.py`: edit the cells there, not this page -->", ""]
    files = {}
    for cell in done:
        if cell["kind"] == "md":
            lines += [cell["text"], ""]
            continue
        lines += ["```python", cell["text"], "```", ""]
        shown = cell["stdout"] + (cell["result"] + "\n" if cell["result"] else "")
        if shown:
            lines += ["```text", shown.rstrip("\n"), "```", ""]
        for png in cell["figures"]:
            name = f"{figure_dir}/figure-{len(files) + 1}.png"
            files[name] = png
            lines += [f"![Figure {len(files)}]({name})", ""]
    return "\n".join(lines).rstrip() + "\n", files


def notebook(done: list[dict]) -> str:
    """The same cells as a Jupyter notebook (nbformat 4) with their outputs."""
    nb_cells, count = [], 0
    for cell in done:
        source = cell["text"].splitlines(keepends=True)
        if cell["kind"] == "md":
            nb_cells.append({"cell_type": "markdown", "metadata": {}, "source": source})
            continue
        count += 1
        outputs = []
        if cell["stdout"]:
            outputs.append({"output_type": "stream", "name": "stdout", "text": cell["stdout"].splitlines(keepends=True)})
        for png in cell["figures"]:
            outputs.append({"output_type": "display_data", "metadata": {},
                            "data": {"image/png": base64.b64encode(png).decode(), "text/plain": ["<Figure>"]}})
        if cell["result"]:
            outputs.append({"output_type": "execute_result", "execution_count": count, "metadata": {},
                            "data": {"text/plain": cell["result"].splitlines(keepends=True)}})
        nb_cells.append({"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs,
                         "source": source})
    nb = {"cells": nb_cells, "metadata": {"kernelspec": {"display_name": "vqlc (.venv)", "language": "python",
                                                          "name": "vqlc"},
                                          "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def write(run: str, out: Path) -> list[Path]:
    """Execute the tutorial on `run` and write tutorial.md, its figures and tutorial.ipynb into `out`."""
    done = run_notebook(run)
    page, files = markdown(done, "tutorial")
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "tutorial.md", out / "tutorial.ipynb"]
    written[0].write_text(page, encoding="utf-8")
    written[1].write_text(notebook(done), encoding="utf-8")
    for name, png in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(png)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="default", help="the built run to run the tutorial on (default: default)")
    ap.add_argument("--out", type=Path, default=DOCS, help="where to write tutorial.md and tutorial.ipynb")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from vqlc_core.base.runio import RunError

    try:
        for path in write(args.run, args.out):
            print(f"wrote {path}")
    except RunError as err:
        print(f"tutorial: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
