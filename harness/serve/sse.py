"""Server-sent events as OpenAI streams them: one `data: {json}` event per chunk, then
`data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

MEDIA_TYPE = "text/event-stream"
DONE = "data: [DONE]\n\n"


def event(obj: Any) -> str:
    """One event carrying `obj` as compact JSON."""
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n"
