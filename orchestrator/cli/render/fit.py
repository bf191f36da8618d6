"""A table that fits the terminal: the columns that identify a row (an id, a status, money) stay whole, free
text is cut with '…' first, then the columns a narrow screen can spare are left out, least needed first
(a footer line says which). No cell wraps onto several lines."""
from __future__ import annotations

from dataclasses import dataclass

MIN_FREE = 6  # the narrowest a free-text column is cut to


@dataclass(frozen=True)
class Col:
    name: str
    right: bool = False       # right-justified (numbers, money)
    free: bool = False        # free text: cut with '…' before anything else gives way
    spare: int = 0            # > 0: may be left out on a narrow screen, the highest first


def fit_table(title: str, cols: list[Col], rows: list[tuple], width: int):
    """A rich Table of `rows` (cells may hold rich markup) no wider than `width`, and the names of the columns
    it left out."""
    from rich.table import Table
    from rich.text import Text

    need = {c.name: max([len(c.name)] + [len(Text.from_markup(str(r[i])).plain) for r in rows])
            for i, c in enumerate(cols)}
    shown = list(cols)
    left_out: list[str] = []
    for drop in [None, *sorted((c for c in cols if c.spare), key=lambda c: -c.spare)]:
        if drop is not None:
            shown.remove(drop)
            left_out.append(drop.name)
        fixed = sum(need[c.name] for c in shown if not c.free) + 3 * len(shown) + 1  # borders and padding
        if fixed + sum(min(MIN_FREE, need[c.name]) for c in shown if c.free) <= width:
            break
    room, wanted = width - fixed, sum(need[c.name] for c in shown if c.free)
    table = Table(title=title, title_justify="left")
    for c in shown:
        cap = max(min(MIN_FREE, need[c.name]), min(need[c.name], room * need[c.name] // max(wanted, 1))) \
            if c.free else need[c.name]
        table.add_column(c.name, justify="right" if c.right else "left", no_wrap=True, overflow="ellipsis",
                         min_width=None if c.free else cap, max_width=cap)
    keep = [i for i, c in enumerate(cols) if c in shown]
    for r in rows:
        table.add_row(*(str(r[i]) for i in keep))
    return table, left_out
