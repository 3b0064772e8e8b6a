"""Sharing in a real browser (Debian's chromium through playwright, as tests/ui/test_browser.py): a link
with run, method, concept and input opens that concept, then that input's explanation, in a fresh
browser context; the link a page offers reopens it, ablations included; the Concepts page prepares and downloads
the file `vqlc export-html` writes; that file opens from disk with the network blocked and shows
the concept grid and a concept's contexts, a script tag in a context shown as text.
Each test leaves a screenshot in test-output/browser/<test-name>-<page>.png."""

from __future__ import annotations

import time
from contextlib import contextmanager
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.runcopy import linked_copy
from tests.ui.test_browser import LONG, SENTENCE, SHOTS, idle, metric_value, sentence
from tests.views.test_export_html import EVIL, evil_copy
from vqlc_core.views import browse, export_html
from vqlc_core.methods.concepts import is_prediction_concept

from dashboard_server import ARGS, CHROMIUM, serve  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (apt-get install chromium)")]


@pytest.fixture(scope="module")
def server(apptest_run, tmp_path_factory):
    """The dashboard over a linked copy of the apptest run (its own ui/ folder)."""
    run = linked_copy(apptest_run.dir, tmp_path_factory.mktemp("cache"))
    with serve(run.dir) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def fresh(browser, request):
    """Opens pages, each in a context of its own (a new browser: no cookies, no Streamlit
    session); each records JS dialogs in `page.dialogs` and leaves a screenshot at the end."""
    expect.set_options(timeout=LONG)
    opened = []

    @contextmanager
    def _page():
        context = browser.new_context(viewport={"width": 1400, "height": 1400})
        pg = context.new_page()
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(f"{d.type}: {d.message}"), d.dismiss()))
        opened.append((context, pg))
        yield pg

    yield _page
    SHOTS.mkdir(parents=True, exist_ok=True)
    for i, (context, pg) in enumerate(opened):
        try:
            pg.screenshot(path=str(SHOTS / f"{request.node.name}-{i}.png"), full_page=True)
        finally:
            context.close()


def shared_link(pg) -> str:
    return pg.locator('[data-testid="stSidebar"] [data-testid="vqlcLink"] code').inner_text().strip()


def same_query(a: str, b: str) -> bool:
    return parse_qs(urlsplit(a).query) == parse_qs(urlsplit(b).query)


def test_a_link_opens_its_concept_and_its_input_in_a_fresh_browser(fresh, server, apptest_run):
    kmeans = apptest_run.concept_set("kmeans")
    with fresh() as pg:
        pg.goto(f"{server}/?" + urlencode({"run": "apptest", "method": "kmeans", "concept": 3, "text": SENTENCE}))
        expect(pg.get_by_role("heading", name="Concepts: kmeans")).to_be_visible()
        expect(pg.get_by_role("heading", name=kmeans.label(3, 5))).to_be_visible()
        idle(pg)
        assert metric_value(pg, "Members") == str(int(kmeans.summary.at[3, "size"]))
        # The same session (the sidebar's page link) on the Explain page: the link's input, explained.
        pg.locator('[data-testid="stSidebarNav"] a', has_text="Explain").click()
        expect(sentence(pg)).to_contain_text("actors")
        idle(pg)
        assert pg.locator('[data-testid="stTextArea"] textarea').input_value() == SENTENCE
        titles = sentence(pg).locator("span[title]").evaluate_all("spans => spans.map(s => s.title)")
        assert len(titles) == len(SENTENCE.split())
        from vqlc_core.views.names import concept_title

        assert set(titles) <= {concept_title(kmeans, "kmeans", k) for k in range(kmeans.n_concepts)}  # as linked
        assert metric_value(pg, "Prediction") in apptest_run.class_names
        assert same_query(pg.url, f"?run=apptest&method=kmeans&text={SENTENCE}")  # now this page's own link


def test_the_link_a_page_offers_reopens_it_with_its_ablations(fresh, server):
    with fresh() as a:
        a.goto(f"{server}/explain?" + urlencode({"run": "apptest", "method": "vqlc", "text": SENTENCE}))
        expect(sentence(a)).to_contain_text("actors")
        idle(a)
        a.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate").first.get_by_text("Ablate").click()
        expect(a.get_by_text("Ablated 1: prediction")).to_be_visible()
        idle(a)
        link = shared_link(a)
        assert link.startswith(f"{server}/explain?") and "ablate=vqlc" in link, link
        assert same_query(a.url, link), (a.url, link)  # the address bar holds the view too
        ablated = metric_value(a, "Ablated 1: prediction")
    with fresh() as b:
        b.goto(link)
        expect(b.get_by_text("Ablated 1: prediction")).to_be_visible()
        idle(b)
        assert metric_value(b, "Ablated 1: prediction") == ablated
        toggles = b.locator('[data-testid="stCheckbox"]').filter(has_text="Ablate")
        assert toggles.first.locator("input").is_checked()
        assert toggles.count() == 1 or not toggles.nth(1).locator("input").is_checked()
        assert same_query(shared_link(b), link)


def test_the_concepts_page_downloads_the_same_file_as_the_command(fresh, server, apptest_run, tmp_path):
    with fresh() as pg:
        pg.goto(f"{server}/?" + urlencode({"run": "apptest", "method": "kmeans"}))
        expect(pg.get_by_role("heading", name="Concepts: kmeans")).to_be_visible()
        idle(pg)
        pg.get_by_role("button", name="Prepare the HTML file").click()  # drawn with a progress bar first
        with pg.expect_download(timeout=LONG) as dl:
            pg.get_by_role("button", name="Download as one HTML file").click(timeout=LONG)
        assert dl.value.suggested_filename == "apptest-kmeans-concepts.html"
        dl.value.save_as(tmp_path / "download.html")
    assert (tmp_path / "download.html").read_text() == export_html.render(apptest_run, "kmeans")


def test_the_exported_file_opens_offline_and_shows_a_script_tag_as_text(fresh, apptest_run, tmp_path):
    run, k = evil_copy(apptest_run, tmp_path)
    out = export_html.write(run, "vqlc", tmp_path / "export.html")
    cs = run.concept_set("vqlc")
    with fresh() as pg:
        asked = []

        def offline(route):
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                asked.append(route.request.url)
                route.abort()

        pg.context.route("**/*", offline)
        requests = []
        pg.on("request", lambda r: requests.append(r.url))
        t0 = time.perf_counter()
        pg.goto(out.as_uri(), wait_until="load")
        print(f"\nexport of {int((cs.sizes > 0).sum())} concepts: opened in {time.perf_counter() - t0:.2f} s")

        cards = pg.locator(".grid a.card")
        expect(cards).to_have_count(int((cs.sizes > 0).sum()))
        loaded = pg.evaluate("""async () => {  // every cloud in the grid is a PNG that decodes
            const urls = [...document.querySelectorAll('.grid .cloud')]
                .map(d => getComputedStyle(d).backgroundImage.slice(5, -2));
            const sizes = await Promise.all(urls.map(u => new Promise(done => {
                const im = new Image(); im.onload = () => done(im.naturalWidth); im.onerror = () => done(0); im.src = u;
            })));
            return {urls: urls.map(u => u.slice(0, 22)), sizes};
        }""")
        words = [j for j in range(cs.n_concepts) if cs.sizes[j] and not is_prediction_concept(cs.summary.loc[j])]
        assert loaded["urls"] == ["data:image/png;base64,"] * len(words)
        assert all(w > 0 for w in loaded["sizes"]), loaded["sizes"]
        expect(pg.locator("table tbody tr")).to_have_count(len(run.faithfulness()))

        pg.locator(f'.grid a.card[href="#c{k}"]').click()
        section = pg.locator(f"section#c{k}")
        expect(section.get_by_role("heading", name=cs.label(k, 5))).to_be_in_viewport()
        contexts = section.locator("ul.contexts li")
        assert contexts.count() >= 1 and section.locator("mark").count() >= 1
        expect(contexts.filter(has_text=EVIL.strip())).to_have_count(1)  # the tag is text on the page
        assert pg.locator("script").count() == 0
        pg.wait_for_timeout(300)
        assert pg.dialogs == [] and asked == []
        assert all(u.startswith(("file://", "data:")) for u in requests), requests


def test_a_link_to_a_page_is_the_first_visit_of_a_fresh_server(fresh, apptest_run, tmp_path):
    # Streamlit runs a fresh server's first visit to a page's own address as a lone page of the
    # old pages/ folder (no app.py: its own navigation, an "app" entry, no page settings) until
    # a run calls st.navigation; the page switches the server to app.py's navigation itself.
    run = linked_copy(apptest_run.dir, tmp_path / "cache")
    with serve(run.dir) as (base, _), fresh() as pg:
        pg.goto(f"{base}/judges?" + urlencode({"run": "apptest"}))
        expect(pg.get_by_role("heading", name="LLM judges")).to_be_visible()
        idle(pg)
        nav = pg.locator('[data-testid="stSidebarNav"] a')
        expect(nav).to_contain_text(["Judges", "Labels"])  # app.py's titles (case-sensitive), not file names
        assert [t.split("\n")[-1] for t in nav.all_inner_texts()] == ["Concepts", "Codebook map", "Explain", "Compare", "Case study",
                                         "Judges", "Labels", "Build"]
        assert urlsplit(pg.url).path == "/judges"


def test_the_sidebar_link_is_shown_whole_with_its_copy_button_in_view(fresh, server):
    with fresh() as pg:
        pg.goto(f"{server}/explain?" + urlencode({"run": "apptest", "method": "vqlc", "text": SENTENCE}))
        expect(sentence(pg)).to_contain_text("actors")
        idle(pg)
        pg.mouse.move(700, 400)  # the pointer away from the sidebar
        code = pg.locator('[data-testid="stSidebar"] [data-testid="vqlcLink"]')
        assert shared_link(pg).replace("\n", "").startswith(f"{server}/explain?")
        box = code.locator("code").first
        assert box.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "the link is cut: it scrolls sideways"
        button = code.locator("button").first
        assert button.evaluate("b => getComputedStyle(b).opacity") == "1"
        assert button.evaluate("b => getComputedStyle(b).visibility") == "visible"
        pg.context.grant_permissions(["clipboard-read", "clipboard-write"])
        button.click()
        assert pg.evaluate("navigator.clipboard.readText()") == code.locator("code").first.text_content()
        expect(button).to_have_text("\u2713")  # says it copied
        # drawn as HTML, not st.code: no page loads Streamlit's syntax highlighter (1.5 MB of JavaScript)
        assert not pg.evaluate("performance.getEntriesByType('resource').map(r => r.name)"
                               ".filter(n => n.includes('SyntaxHighlighter'))")
