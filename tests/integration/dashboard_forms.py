"""What the dashboard tests read off its forms."""

from __future__ import annotations

import re

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(page) -> str:
    """The CSRF token a rendered page carries in its forms."""
    return CSRF_FIELD.search(page.text).group(1)
