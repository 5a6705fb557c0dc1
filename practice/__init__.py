"""The practice system, apart from the UI: the progress store (SQLite), review scheduling
(FSRS, rating suggestions, the drill's queues, mock picks) and statistics."""
