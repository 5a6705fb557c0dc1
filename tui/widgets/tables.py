"""Small helpers for Textual's DataTable."""
from __future__ import annotations

from textual.widgets import DataTable


def selected_key(table: DataTable) -> str | None:
    """The key of the row under the cursor, or None for an empty table."""
    if table.row_count == 0:
        return None
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
