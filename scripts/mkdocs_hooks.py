"""MkDocs hook: links from docs/ to repository files outside docs/ become repository links.

``[quickstart](../examples/quickstart.py)`` in a page would otherwise be a broken link on the
site. The target must exist in the repository, or the build fails, so such links are checked
like any other.
"""

from __future__ import annotations

import os
import re

from mkdocs.exceptions import PluginError

_LINK = re.compile(r'(\]\()(\.\./[^)\s#]+)(#[^)\s]*)?(\))')


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001
    docs = os.path.abspath(config['docs_dir'])
    repo = os.path.dirname(docs)
    base = config['repo_url'].rstrip('/') + '/blob/main/'
    page_dir = os.path.dirname(os.path.join(docs, page.file.src_path))

    def rewrite(match: re.Match) -> str:
        target = os.path.normpath(os.path.join(page_dir, match.group(2)))
        if target.startswith(docs + os.sep) or target == docs:
            return match.group(0)  # Inside docs/: MkDocs checks it.
        if not target.startswith(repo + os.sep) or not os.path.exists(target):
            raise PluginError(f'{page.file.src_path}: link to {match.group(2)} points to no '
                              f'file in the repository.')
        rel = os.path.relpath(target, repo).replace(os.sep, '/')
        return f'{match.group(1)}{base}{rel}{match.group(3) or ""}{match.group(4)}'

    return _LINK.sub(rewrite, markdown)
