"""``report.html``: ``report.md`` as one self-contained page.

The markdown is rendered with markdown-it-py (CommonMark with tables; raw HTML in the plan's text
is shown as text, never passed through), every figure the report wrote is embedded as a base64
``data:`` URI, and the styles are inline. The page has no script and names no other file or
address: its Content-Security-Policy allows only inline styles and ``data:`` images, so opening
it makes no request. A figure the markdown names but the report did not write as a PNG is shown
as a note naming it.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from markdown_it import MarkdownIt

from ..errors import writing

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 72rem; margin: 2rem auto;
       padding: 0 1rem; color: #1b1b1b; }
h1, h2, h3 { line-height: 1.2; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9em; }
th, td { border-top: 1px solid #bbb; border-bottom: 1px solid #bbb; padding: 0.25rem 0.6rem; text-align: left; }
thead th { border-top: 2px solid #333; border-bottom: 1.5px solid #333; }
tbody tr:last-child td { border-bottom: 2px solid #333; }
img { max-width: 100%; height: auto; display: block; margin: 1rem 0; }
code { font-size: 0.92em; background: #f3f3f3; padding: 0 0.2em; }
blockquote { border-left: 4px solid #c33; margin: 1rem 0; padding: 0.3rem 1rem; background: #fbeeee; }
.missing { color: #a00; font-style: italic; }
.exploratory { background: #8a5a00; color: #fff; padding: 0.4rem 0.8rem; }
"""
# only on a dry run's page: a real report names SYNTHETIC nowhere
SYNTHETIC_CSS = """body.synthetic::before { content: "SYNTHETIC \\2014  simulated runs (prereg dry-run), not results"; display: block;
       background: #b00; color: #fff; font-weight: bold; padding: 0.4rem 0.8rem; margin-bottom: 1rem; }
"""
EXPLORATORY_BAND = "EXPLORATORY — the preregistration checks failed; no result here carries confirmatory weight"


def _renderer(images: dict[str, str]) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["link", "autolink"])

    def image(self, tokens, idx, options, env):  # markdown-it's render-rule signature
        tok = tokens[idx]
        src, alt = str(tok.attrGet("src") or ""), self.renderInlineAsText(tok.children or [], options, env)
        if src not in images:  # never a reference to another file or address
            return f'<span class="missing">[figure not embedded: {html.escape(src)}]</span>'
        return f'<img src="data:image/png;base64,{images[src]}" alt="{html.escape(alt)}">'

    md.add_render_rule("image", image)
    return md


def render_html(markdown: str, images: dict[str, bytes], *, synthetic: bool = False, exploratory: bool = False) -> str:
    """The page: ``markdown`` rendered, ``images`` (name as the markdown writes it → PNG bytes)
    embedded, the title from the first ``# `` heading; ``synthetic`` adds a band at the top,
    ``exploratory`` a band as the page's first text (it reads in any viewer, styled or not)."""
    encoded = {name: base64.b64encode(data).decode("ascii") for name, data in images.items()}
    body = _renderer(encoded).render(markdown)
    if exploratory:
        body = f'<p class="exploratory"><strong>{html.escape(EXPLORATORY_BAND)}</strong></p>\n' + body
    cls = ' class="synthetic"' if synthetic else ""
    title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), "report")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}{SYNTHETIC_CSS if synthetic else ''}</style>\n</head>\n"
            f"<body{cls}>\n{body}</body>\n</html>\n")


def write_html(out_dir: Path, markdown: str, written: list[Path], *, synthetic: bool = False,
               exploratory: bool = False) -> Path:
    """``out_dir/report.html`` from ``markdown``, embedding every PNG among ``written`` (the files
    the report wrote) under its path relative to ``out_dir``; returns its path."""
    images = {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in written
              if p.suffix.lower() == ".png" and p.is_relative_to(out_dir) and p.exists()}
    path = out_dir / "report.html"
    with writing(path):
        path.write_text(render_html(markdown, images, synthetic=synthetic, exploratory=exploratory), encoding="utf-8")
    return path
