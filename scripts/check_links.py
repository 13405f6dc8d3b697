#!/usr/bin/env python3
"""Check every relative link and anchor in a built mdBook (HTML) resolves.

Usage: scripts/check_links.py target/book
External links (http, https, mailto) are listed but not fetched: CI has no general network.
"""
import html.parser
import pathlib
import sys
import urllib.parse


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if key in a and a[key]:
                self.links.append(a[key])


def main(root: pathlib.Path) -> int:
    pages = {}
    for page in root.rglob("*.html"):
        if page.name == "404.html":  # served from the site root; its links are absolute
            continue
        p = Links()
        p.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = p
    bad, external = [], 0
    for page, parsed in pages.items():
        for link in parsed.links:
            url = urllib.parse.urlparse(link)
            if url.scheme or link.startswith("//"):
                external += 1
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                bad.append(f"{page.relative_to(root.resolve())}: {link} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if url.fragment not in ids:
                    bad.append(f"{page.relative_to(root.resolve())}: {link} (no such anchor)")
    for b in bad:
        print("broken link:", b)
    print(f"checked {len(pages)} pages: {len(bad)} broken, {external} external links not fetched")
    return 1 if bad or not pages else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/book")))
