"""The dashboard in a real browser: `streamlit run app.py` on a free local port, driven by
Debian's chromium through playwright, on the small run cache/runs/apptest (the same run as
tests/ui/test_pages.py). Each test leaves a screenshot in test-output/browser/<test-name>.png.
Skipped when /usr/bin/chromium is missing (test.sh installs it when run as root)."""

from __future__ import annotations

import io
import re
import time
import zipfile

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.conftest import ROOT
from tests.runcopy import linked_copy

from dashboard_server import ARGS, CHROMIUM, serve  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
SHOTS = ROOT / "test-output" / "browser"
SENTENCE = "the plot is thin but the actors seem to enjoy themselves"  # plain words, one word each
EVIL = "<img src=x onerror=alert(1)> a fine <script>alert(2)</script> film"
LONG = 60_000  # ms: a page may wait for the model to load


@pytest.fixture(scope="module")
def server(apptest_run, tmp_path_factory):
    """The dashboard on a free port, reading a cache that holds only the apptest run (a linked copy
    with its own ui/ folder: the pins a test saves with the run stay the test's)."""
    run = linked_copy(apptest_run.dir, tmp_path_factory.mktemp("cache"))
    with serve(run.dir) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser(server):
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, server, request):
    """A fresh page (own context, so its own Streamlit session) that records any JS dialog in
    `page.dialogs` and leaves a screenshot when the test ends, passed or failed."""
    expect.set_options(timeout=LONG)
    context = browser.new_context(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    pg = context.new_page()
    pg.base = server
    pg.dialogs = []

    def on_dialog(d):
        pg.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    pg.on("dialog", on_dialog)
    yield pg
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        pg.screenshot(path=str(SHOTS / f"{request.node.name}.png"), full_page=True)
    finally:
        context.close()


def idle(pg) -> None:
    """Wait until Streamlit has finished its current script run (its app root says so), no
    element is left stale from the previous run and no skeleton waits for a lazily loaded
    component (buttons, images and charts come as separate scripts on a first load). Call it
    after the action's first visible effect: right after a click the script may not have
    started yet."""
    pg.wait_for_function("""() =>
        document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
        && !document.querySelector('[data-stale="true"], [data-testid^="stSkeleton"], [data-testid="stAppSkeleton"]')
    """, timeout=LONG)
    pg.wait_for_timeout(200)


def still(pg) -> None:
    """Wait until no animation runs on the page. An expander animates its height (the Web
    Animations API) when it opens and again when its content's height changes, and the layout
    below it moves meanwhile: on a loaded machine a click pressed before the move and released
    after it lands on the container, and the button under it never fires (seen with the label
    form's Save, one run in ten beside busy loops)."""
    pg.wait_for_function("() => document.getAnimations().every(a => a.playState !== 'running')", timeout=LONG)


def open_expander(pg, label) -> None:
    """Open the expander whose summary reads `label` and wait until it has stopped growing."""
    pg.get_by_text(label).click()
    still(pg)


def open_page(pg, path: str, title: str) -> None:
    pg.goto(f"{pg.base}/{path}")
    expect(pg.get_by_role("heading", name=title)).to_be_visible()
    idle(pg)


def metric_value(pg, label: str) -> str:
    named = pg.locator('[data-testid="stMetricLabel"]', has_text=re.compile("^" + re.escape(label)))
    m = pg.locator('[data-testid="stMetric"]').filter(has=named)
    return m.locator('[data-testid="stMetricValue"]').inner_text().strip()


def explain(pg, text: str, marker: str) -> None:
    """Type `text` into the Explain page's input, commit it (Ctrl+Enter) and wait until the
    coloured sentence shows `marker` (a word of `text` absent from the example input)."""
    box = pg.locator('[data-testid="stTextArea"] textarea')
    box.fill(text)
    box.press("Control+Enter")
    expect(sentence(pg)).to_contain_text(marker)
    idle(pg)


def sentence(pg):
    """The coloured-sentence block of the Explain page (`vqlc_ui.colored_sentence`, drawn with st.html)."""
    return pg.locator('[data-testid="stHtml"] .vqlc-sentence')


def test_browse_concepts_and_open_one(page):
    open_page(page, "", "Concepts: vqlc")
    main = page.locator('[data-testid="stMain"]')
    cards = main.get_by_role("button", name="Open", exact=True)
    assert cards.count() >= 2
    assert main.locator('[data-testid="stImage"] img').count() >= 1, "no word cloud is shown"
    assert main.get_by_text(re.compile(r"members, purity")).count() == cards.count()
    cards.nth(1).click()
    expect(page.get_by_role("button", name="Back to all concepts")).to_be_visible()
    idle(page)
    assert metric_value(page, "Members").isdigit()
    heading = page.locator("h3").first.inner_text()
    assert re.match(r"c\d+: ", heading), heading
    assert main.locator("mark").count() >= 1, "the contexts do not highlight the member word"
    expect(main.locator(".js-plotly-plot .main-svg").first).to_be_visible()  # the class distribution


def test_codebook_map_click_on_a_point_opens_the_concept(page, apptest_run):
    open_page(page, "codebook_map", "Codebook map: vqlc")
    points = page.locator(".scatterlayer .trace .points path")
    expect(points.first).to_be_visible()
    assert points.count() == len(apptest_run.concepts("vqlc").used_ids())  # word and prediction concepts
    # Most points are a pixel or two wide (size = members); aim at the largest.
    boxes = [points.nth(i).bounding_box() for i in range(points.count())]
    box = max(boxes, key=lambda b: b["width"])
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    expect(page.locator(".hoverlayer .hovertext")).to_be_attached()
    concept = re.match(r"c\d+", page.locator(".hoverlayer").text_content()).group(0)  # hover_name first
    page.mouse.click(x, y)
    expect(page.get_by_role("heading", name=re.compile(rf"^{concept}: "))).to_be_visible()
    idle(page)
    assert metric_value(page, "Members").isdigit()


def test_explain_colours_every_word_and_shows_concept_cards(page):
    open_page(page, "explain", "Explain a prediction")
    explain(page, SENTENCE, "actors")
    spans = sentence(page).locator("span[title]")
    assert spans.count() == len(SENTENCE.split())
    # each concept named per method (Compare shows several methods' concepts side by side)
    assert all(re.match(r"VQLC \d+: ", t) for t in [spans.nth(i).get_attribute("title") for i in range(spans.count())])
    assert metric_value(page, "Prediction") in ("negative", "positive")
    assert 0.0 < float(metric_value(page, "Confidence")) <= 1.0
    toggles = page.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate")
    assert toggles.count() >= 1, "no concept card with an ablation toggle"
    for i in range(toggles.count()):  # each toggle sits in a card: word cloud | concept label, why, toggle
        card = toggles.nth(i).locator("xpath=ancestor::div[@data-testid='stVerticalBlock'][2]")
        assert re.match(r"VQLC \d+: ", card.locator("strong").first.inner_text())
        assert card.locator('[data-testid="stImage"] img').count() == 1


def test_toggling_a_concept_changes_the_shown_confidence(page):
    open_page(page, "explain", "Explain a prediction")
    explain(page, SENTENCE, "actors")
    before = float(metric_value(page, "Confidence"))
    toggles = page.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate")
    n = toggles.count()
    assert n >= 1
    t0 = time.perf_counter()
    for i in range(n):  # ablate every shown concept together
        toggles.nth(i).get_by_text("Ablate").click()
        expect(page.get_by_text(f"Ablated {i + 1}: prediction")).to_be_visible()
        idle(page)
    print(f"\n{n} ablation toggles: {time.perf_counter() - t0:.2f} s")
    expect(page.locator('[data-testid="stMetricDelta"]')).to_be_visible()
    after = float(re.search(r"\(([0-9.]+)\)", metric_value(page, f"Ablated {n}: prediction")).group(1))
    assert abs(after - before) > 1e-4, (before, after)
    assert toggles.first.locator("input").is_checked()


def download(page, label: str):
    """Click a download button and return the download. The Case study's download buttons rerun
    nothing (on_click="ignore"): a rerun started by the click used to race the zip being drawn,
    and Streamlit drops a drawn file's answer still queued when a run starts, leaving the button
    disabled (the flaky "element is not enabled"). So one click is enough, however fast the next."""
    with page.expect_download(timeout=30_000) as dl:
        page.get_by_role("button", name=label).click()
    return dl.value


def test_pin_and_download_a_case_study_file(page):
    open_page(page, "explain", "Explain a prediction")
    explain(page, SENTENCE, "actors")
    page.get_by_role("button", name=re.compile("Pin for the case study")).click()
    expect(page.get_by_text("Pinned: 1 pin in the case study.")).to_be_visible()
    idle(page)
    # The sidebar link keeps the session; a URL would start a new one (pins are saved with the run either way).
    page.locator('[data-testid="stSidebarNav"] a', has_text="Case study").click()
    expect(page.get_by_role("heading", name=re.compile(r"^Pin 1: vqlc"))).to_be_visible()
    idle(page)
    files = {}
    for label in ("Table (CSV)", "Everything (zip with report.md)", "Table (CSV)", "Everything (zip with report.md)"):
        t0 = time.perf_counter()
        d = download(page, label)  # at once after the previous one: no rerun is left to race
        print(f"\ndownload {label}: {time.perf_counter() - t0:.2f} s")
        path = SHOTS / f"case_study_{d.suggested_filename}"
        SHOTS.mkdir(parents=True, exist_ok=True)
        d.save_as(path)
        files[d.suggested_filename] = path.read_bytes()
    assert set(files) == {"case_study.csv", "case_study.zip"}
    assert SENTENCE in files["case_study.csv"].decode()
    bundle = zipfile.ZipFile(io.BytesIO(files["case_study.zip"]))
    assert "report.md" in bundle.namelist() and b"From: run apptest, model minilm" in bundle.read("report.md")


def test_html_in_the_input_is_shown_as_text_and_never_runs(page):
    open_page(page, "explain", "Explain a prediction")
    explain(page, EVIL, "onerror")
    # The coloured sentence tags each word with its concept id in a <sub>; without those tags
    # its visible text is the input itself, markup included, so the markup was escaped.
    words = sentence(page).evaluate(
        "e => { const c = e.cloneNode(true); c.querySelectorAll('sub').forEach(s => s.remove()); return c.innerText }")
    assert words.strip() == EVIL
    assert "<img" in words and "<script>" in words
    assert page.locator('[data-testid="stMain"] img[src="x"]').count() == 0
    assert page.locator('[data-testid="stMain"] script').count() == 0
    page.wait_for_timeout(500)  # let an onerror handler fire, if one was ever attached
    assert page.dialogs == []


@pytest.mark.parametrize("height", [900, 560])
def test_the_ablation_result_is_in_view_beside_each_toggle(page, height):
    page.set_viewport_size({"width": 1400, "height": height})
    open_page(page, "explain", "Explain a prediction")
    explain(page, SENTENCE, "actors")
    toggles = page.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate")
    result = page.locator('[data-testid="stMetric"]').filter(has_text="Ablated")
    for i in range(toggles.count()):
        # as a reader brings a card into view: in the window, not flush with its edge (a click's own
        # scroll leaves it there, and the rerun's redraw can then move it a pixel or two out)
        toggles.nth(i).evaluate("e => e.scrollIntoView({block: 'center'})")
        toggles.nth(i).get_by_text("Ablate").click()
        expect(result.filter(has_text=f"Ablated {i + 1}: prediction")).to_be_visible()
        idle(page)
        for what in (toggles.nth(i), result):  # both on screen at once: no scrolling between them
            box = what.bounding_box()
            assert box and 0 <= box["y"] and box["y"] + box["height"] <= height, (i, box)


SET_TYPED = """([parts]) => {  // what a script or a paste can put in the box: any UTF-16, lone halves too
    const box = document.querySelector('[data-testid="stTextArea"] textarea');
    const setter = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
    box.focus(); setter.call(box, String.fromCharCode(...parts));
    box.dispatchEvent(new Event('input', {bubbles: true}));
}"""


@pytest.mark.parametrize("text, marker, shown, notice", [
    ("a grim \ud800 film \udc00", "grim", "a grim \ufffd film \ufffd", None),
    ("a bleak\x00 film\x07", "bleak", "a bleak  film ", "2 control character(s) were replaced by spaces."),
], ids=["lone surrogates", "control characters"])
def test_text_that_cannot_be_sent_as_typed_is_cleaned_and_explained(page, text, marker, shown, notice):
    closed = []
    page.on("websocket", lambda ws: ws.on("close", lambda _: closed.append(ws.url)))
    open_page(page, "explain", "Explain a prediction")
    page.evaluate(SET_TYPED, [[ord(c) if ord(c) < 0x10000 else 0 for c in text]])
    page.locator('[data-testid="stTextArea"] textarea').press("Control+Enter")
    expect(sentence(page)).to_contain_text(marker)  # the new input's result, not the previous one's
    idle(page)
    assert closed == [], "the connection to the server was closed"
    assert page.locator('[data-testid="stTextArea"] textarea').input_value() == shown
    if notice:
        expect(page.get_by_text(notice)).to_be_visible()


def test_a_label_written_on_a_concept_names_it_on_its_card(page):
    open_page(page, "?run=apptest&method=vqlc&concept=3", "Concepts: vqlc")
    main = page.locator('[data-testid="stMain"]')
    open_expander(page, "Write a label")
    name = main.get_by_label("Name")
    expect(name).to_be_visible()
    name.fill("<i>thin</i> words")
    still(page)
    page.get_by_role("button", name="Save the label").click()
    expect(page.get_by_role("heading", name="c3: <i>thin</i> words (edited)")).to_be_visible()
    idle(page)
    card = main.locator('[data-testid="stVerticalBlock"]').filter(
        has=page.get_by_text("c3: <i>thin</i> words (edited)", exact=True)).filter(
        has=page.get_by_role("button", name="Open", exact=True)).last
    expect(card).to_be_visible()  # the grid's card of c3 carries the label too, as typed
    assert main.locator("i", has_text="thin").count() == 0  # shown as text, never as markup
    assert not page.dialogs


PAGES = [("", "Concepts: vqlc"), ("codebook_map", "Codebook map: vqlc"), ("explain", "Explain a prediction"),
         ("compare", "Compare concept methods"), ("case_study", "Case study"), ("judges", "LLM judges"),
         ("labels", "Concept labels"), ("build", "Build a run")]


def test_no_request_leaves_the_machine_on_any_page(page):
    """Offline means offline: icon fonts, telemetry or anything else fetched from a third party
    fails without a network and tells that party someone opened the dashboard."""
    local = re.compile(rf"^(ws|http)://{re.escape(page.base.split('://', 1)[1])}/|^(data|blob|about):")
    outside = []
    page.on("request", lambda r: None if local.match(r.url) else outside.append(r.url))
    page.on("websocket", lambda ws: None if local.match(ws.url) else outside.append(ws.url))
    for path, title in PAGES:
        open_page(page, path, title)
        page.wait_for_timeout(500)  # a font or a beacon may be asked for after the script's run
    assert outside == [], f"requests to other hosts: {sorted(set(outside))}"


@pytest.mark.parametrize("text, marker", [("it cost $5 and $10 , great", "cost"), ("a \\ b film", "\\")],
                         ids=["dollars", "backslash"])
def test_markdown_in_the_input_is_shown_as_typed(page, text, marker):
    """A `$` pair was LaTeX math and a backslash an escape: the coloured sentence's HTML showed as
    text (`<sub style=...>`) in place of words."""
    open_page(page, "explain", "Explain a prediction")
    explain(page, text, marker)
    shown = sentence(page).evaluate(
        "e => { const c = e.cloneNode(true); c.querySelectorAll('sub').forEach(s => s.remove()); return c.innerText }")
    assert shown.strip() == text
    assert sentence(page).locator("span[title]").count() >= len(text.split())  # the tokenizer splits "$5" too
    main = page.locator('[data-testid="stMain"]')
    assert "<sub" not in main.inner_text() and "<span" not in main.inner_text()
    assert main.locator(".katex").count() == 0  # no math was typeset


def test_a_pin_keeps_the_concepts_ablated_together_and_the_case_study_shows_them_first(page):
    open_page(page, "explain", "Explain a prediction")
    explain(page, SENTENCE, "actors")
    toggles = page.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate")
    assert toggles.count() >= 2, "the page shows fewer than two concepts to ablate"
    ids = []
    for i in range(2):
        card = toggles.nth(i).locator("xpath=ancestor::div[@data-testid='stVerticalBlock'][2]")
        ids.append(int(re.match(r"VQLC (\d+): ", card.locator("strong").first.inner_text()).group(1)))
        toggles.nth(i).get_by_text("Ablate").click()
        expect(page.get_by_text(f"Ablated {i + 1}: prediction")).to_be_visible()
        idle(page)
    on_screen = metric_value(page, "Ablated 2: prediction")  # e.g. "negative (0.524)"
    page.get_by_role("button", name=re.compile("Pin for the case study")).click()
    expect(page.get_by_text(re.compile(r"^Pinned: \d+ pins? in the case study\."))).to_be_visible()
    idle(page)
    page.locator('[data-testid="stSidebarNav"] a', has_text="Case study").click()
    label = f"Ablated {' + '.join(f'VQLC {k}' for k in sorted(ids))} together: prediction"
    expect(page.get_by_text(label)).to_be_visible()
    idle(page)
    assert metric_value(page, label) == on_screen
    card = page.locator('[data-testid="stVerticalBlockBorderWrapper"], [data-testid="stVerticalBlock"]').filter(
        has=page.get_by_text(label)).filter(has=page.locator('[data-testid="stDataFrame"]')).last
    together = card.locator('[data-testid="stMetric"]').filter(has_text=label).bounding_box()
    table = card.locator('[data-testid="stDataFrame"]').bounding_box()
    assert together["y"] < table["y"], "the combination is not shown before each concept alone"


def test_filtering_concepts_by_a_tag_shows_only_concepts_aligned_with_it(page, apptest_run):
    from vqlc_core.evaluate import tag_alignment as ta

    method, p, label = next((m, p, lab) for m in apptest_run.methods_built()
                            for p in [apptest_run.tag_profiles(m)]
                            for lab in ta.aligned_tag_labels(p) if not lab.startswith("casing"))
    want = ta.concepts_aligned_with(p, label)
    open_page(page, f"?run=apptest&method={method}", f"Concepts: {method}")
    main = page.locator('[data-testid="stMain"]')
    assert main.get_by_role("button", name="Open", exact=True).count() > len(want)
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text="Aligned with tag").click()
    page.get_by_role("option", name=f"{label} ({len(want)})").click()
    expect(main.get_by_role("button", name="Open", exact=True)).to_have_count(len(want))
    idle(page)
    tag = label.split(": ", 1)[1]
    names = main.get_by_text(re.compile(r"^c\d+: ")).all_inner_texts()
    assert sorted(int(n[1:].split(":")[0]) for n in names) == want
    shown = main.get_by_text(re.compile(r"^Tags: ")).all_inner_texts()
    assert len(shown) == len(want) and all(tag in s and "✓" in s for s in shown), shown


def test_saving_a_label_says_so_on_the_page(page):
    """The page says the label was saved in a line that stays, not only in a toast: a toast lives
    4 s from when the browser draws it, and a browser busy redrawing the page on a loaded machine
    passed those seconds before a check saw it (the toast itself is checked in test_pages)."""
    open_page(page, "?run=apptest&method=vqlc&concept=5", "Concepts: vqlc")
    open_expander(page, re.compile("^(Write|Edit) a label$"))
    name = page.locator('[data-testid="stMain"]').get_by_label("Name")
    expect(name).to_be_visible()
    name.fill("five words")
    still(page)
    page.get_by_role("button", name="Save the label").click()
    main = page.locator('[data-testid="stMain"]')
    expect(main.locator('[data-testid="stAlert"]').filter(has_text="Label of c5 saved with the run")).to_be_visible()
    expect(page.get_by_role("heading", name="c5: five words (edited)")).to_be_visible()
    idle(page)
    expect(main.locator('[data-testid="stAlert"]').filter(has_text="Label of c5 saved with the run")).to_be_visible()
