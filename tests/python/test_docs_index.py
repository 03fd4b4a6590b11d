"""docs/README.md lists every page of docs/, and every link between the
pages and from the README leads to a page that exists."""

import os
import re

from conftest import REPO

DOCS = os.path.join(REPO, "docs")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def test_the_index_lists_every_page():
    with open(os.path.join(DOCS, "README.md")) as f:
        listed = set(LINK.findall(f.read()))
    pages = {name for name in os.listdir(DOCS) if name.endswith(".md") and name != "README.md"}
    assert pages - listed == set(), "add these to docs/README.md"
    assert listed - pages == set(), "docs/README.md links to pages that do not exist"


def test_links_to_pages_lead_somewhere():
    sources = [os.path.join(REPO, "README.md")] + [os.path.join(DOCS, n) for n in os.listdir(DOCS)
                                                   if n.endswith(".md")]
    broken = []
    for source in sources:
        with open(source) as f:
            for target in LINK.findall(f.read()):
                if "://" in target:
                    continue
                if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(source), target))):
                    broken.append(f"{os.path.relpath(source, REPO)} -> {target}")
    assert broken == []
