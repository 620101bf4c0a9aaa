"""Tables that fit the terminal (80 columns too) without cutting a header or a value.

rich, left to itself, cuts what does not fit ("Parti…", "under-repl…", a topic id with an ellipsis) or crops whole
columns. :func:`print_table` gives rich every column's width itself: a column is as wide as its longest value and
the longest word of its header (a header of several words wraps onto lines), and when the terminal is too narrow
the columns marked ``fold`` (free text: topic names, ids, reasons) give up width and fold their values onto more
lines; numbers and short words never shrink.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Col", "print_table"]

#: a folding column keeps at least this many characters (or its header's longest word)
_FOLD_MIN = 8


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    right: bool = False  # numbers: right-justified
    fold: bool = False  # free text that may fold onto several lines when the terminal is narrow
    dim: bool = False


def _widths(cols: Sequence[Col], rows: Sequence[Sequence[str]], budget: int, header: bool) -> list[int]:
    from rich.cells import cell_len

    def longest_word(text: str) -> int:
        return max((cell_len(w) for w in text.split()), default=1)

    cells = [max((cell_len(r[i]) for r in rows), default=0) for i in range(len(cols))]
    natural = [max(cells[i], cell_len(c.header) if header else 0, 1) for i, c in enumerate(cols)]
    if sum(natural) <= budget:
        return natural
    # first let headers of several words wrap (down to their longest word or their longest value)
    widths = [max(cells[i], longest_word(c.header) if header else 0, 1) for i, c in enumerate(cols)]
    floor = [max(longest_word(c.header) if header else 1, min(_FOLD_MIN, widths[i])) if c.fold else widths[i]
             for i, c in enumerate(cols)]
    # then the widest folding column gives up width, one character at a time, down to its floor
    excess = sum(widths) - budget
    while excess > 0:
        shrinkable = [i for i, c in enumerate(cols) if c.fold and widths[i] > floor[i]]
        if not shrinkable:
            break  # too narrow even so: rich crops the right edge
        i = max(shrinkable, key=lambda j: widths[j])
        widths[i] -= 1
        excess -= 1
    return widths


def print_table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], *,
                show_header: bool = True) -> None:
    """One table on stdout, as wide as the terminal (COLUMNS when stdout is not a terminal, else 80 columns)."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # columns apart by two spaces (one of padding, one of the box's blank separator), a rule under the header, no
    # border: kafka-topics.sh's and kafka-consumer-groups.sh's look, and 2 characters per column instead of 3
    budget = console.width - 2 * (len(cols) - 1)
    widths = _widths(cols, rows, budget, show_header)
    if title is not None and cell_len(title) > sum(widths) + 2 * (len(cols) - 1):
        console.print(title, highlight=False, markup=False)  # a line of its own, not folded into a narrow table
        title = None
    table = Table(title=title, show_header=show_header, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0))
    for c, w in zip(cols, widths):
        table.add_column(c.header, justify="right" if c.right else "left", width=w, overflow="fold",
                         style="dim" if c.dim else None)
    for r in rows:
        table.add_row(*r)
    console.print(table)

