"""Human-readable dates -> ISO dates: a character-level translation task with reordering.

"3rd of March 1992", "Mar 3, 1992", "tuesday 03/03/92" all translate to "1992-03-03". The task is
the classic small demonstration of attention in an encoder-decoder (Bahdanau, Cho & Bengio 2015,
"Neural Machine Translation by Jointly Learning to Align and Translate"): to write the year first
the decoder must look at the end of "3 March 1992" but at the start of "1992 March 3", and an
attention heatmap shows exactly that. Formats are grouped by field order (``DATE_ORDERS``) for that
plot, and ``filler_words`` / the ``"verbose"`` format make long sources for the
accuracy-versus-source-length experiment.

Conventions (fixed, so that every source has exactly one right answer): slashes in all-numeric
formats are US month/day ("03/04/1992" is March 4), dots and dashes are day.month ("03.04.1992" is
3 April); two-digit years pivot at 50 ("49" -> 2049, "50" -> 1950).

Shape legend: ``B`` batch, ``T`` characters.
"""

from __future__ import annotations

import datetime as dt
import difflib
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils.data import Dataset

from .vocab import Vocab, seq2seq_collate

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

#: Every character a source can contain (the source vocabulary is fixed, so data sets built with
#: different seeds or formats share it).
SOURCE_CHARS = (
    "abcdefghijklmnopqrstuvwxyz" "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "0123456789" " ,./-"
)  # fmt: skip
TARGET_CHARS = "0123456789-"

#: Filler words for long sources; none contains a month or weekday abbreviation or a digit.
FILLER_WORDS = (
    "um", "well", "so", "it", "was", "is", "the", "date", "please", "note", "that", "i", "think",
    "about", "our", "big", "event", "held", "scheduled", "for", "hmm", "ok", "yes", "exactly",
)  # fmt: skip

TWO_DIGIT_PIVOT = 50
TWO_DIGIT_YEAR_RANGE = (1900 + TWO_DIGIT_PIVOT, 2000 + TWO_DIGIT_PIVOT - 1)


def ordinal(n: int) -> str:
    """``1 -> "1st"``, ``2 -> "2nd"``, ``11 -> "11th"``, ``23 -> "23rd"``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _month(d: dt.date) -> str:
    return MONTHS[d.month - 1]


def _mon(d: dt.date) -> str:
    return MONTHS[d.month - 1][:3]


def _weekday(d: dt.date) -> str:
    return WEEKDAYS[d.weekday()]


def _yy(d: dt.date) -> str:
    return f"{d.year % 100:02d}"


# name -> (field order, renderer). Examples are for 1992-03-03, a Tuesday.
_FORMATS: dict[str, tuple[str, Callable[[dt.date], str]]] = {
    # day - month - year
    "d_month_y": ("DMY", lambda d: f"{d.day} {_month(d)} {d.year}"),  # 3 March 1992
    "dth_of_month_y": ("DMY", lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}"),
    "the_dth_of_month_y": ("DMY", lambda d: f"the {ordinal(d.day)} of {_month(d)}, {d.year}"),
    "d_mon_yy": ("DMY", lambda d: f"{d.day} {_mon(d).lower()} {_yy(d)}"),  # 3 mar 92
    "dd.mm.yyyy": ("DMY", lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}"),  # 03.03.1992
    "dd-mm-yyyy": ("DMY", lambda d: f"{d.day:02d}-{d.month:02d}-{d.year}"),
    "weekday_d_month_y": ("DMY", lambda d: f"{_weekday(d)} {d.day} {_month(d)} {d.year}"),
    "verbose": (  # on the 3rd day of March in the year 1992
        "DMY",
        lambda d: f"on the {ordinal(d.day)} day of {_month(d)} in the year {d.year}",
    ),
    # month - day - year
    "month_d_y": ("MDY", lambda d: f"{_month(d)} {d.day}, {d.year}"),  # March 3, 1992
    "mon_d_y": ("MDY", lambda d: f"{_mon(d)} {d.day}, {d.year}"),  # Mar 3, 1992
    "month_dth_y": ("MDY", lambda d: f"{_month(d)} {ordinal(d.day)}, {d.year}"),  # March 3rd, 1992
    "MON_D_YYYY": ("MDY", lambda d: f"{_mon(d).upper()} {d.day} {d.year}"),  # MAR 3 1992
    "mm/dd/yyyy": ("MDY", lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}"),  # 03/03/1992
    "m/d/yy": ("MDY", lambda d: f"{d.month}/{d.day}/{_yy(d)}"),  # 3/3/92
    "weekday_mm/dd/yy": (  # tuesday 03/03/92
        "MDY",
        lambda d: f"{_weekday(d).lower()} {d.month:02d}/{d.day:02d}/{_yy(d)}",
    ),
    "weekday_month_d_y": (  # Tuesday, March 3, 1992
        "MDY",
        lambda d: f"{_weekday(d)}, {_month(d)} {d.day}, {d.year}",
    ),
    # year - month - day
    "y_month_d": ("YMD", lambda d: f"{d.year} {_month(d)} {d.day}"),  # 1992 March 3
    "y_mon_d": ("YMD", lambda d: f"{d.year} {_mon(d).lower()} {d.day}"),  # 1992 mar 3
    "y_month_dth": ("YMD", lambda d: f"{d.year}, {_month(d)} {ordinal(d.day)}"),
    "yyyy/mm/dd": ("YMD", lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}"),  # 1992/03/03
    "yyyymmdd": ("YMD", lambda d: f"{d.year}{d.month:02d}{d.day:02d}"),  # 19920303
}

#: All format names.
DATE_FORMATS: tuple[str, ...] = tuple(_FORMATS)
#: Format names grouped by the order of their fields: ``"DMY"``, ``"MDY"``, ``"YMD"``.
DATE_ORDERS: dict[str, tuple[str, ...]] = {
    order: tuple(name for name, (o, _) in _FORMATS.items() if o == order)
    for order in ("DMY", "MDY", "YMD")
}
#: Formats that write the year with two digits (need years in ``TWO_DIGIT_YEAR_RANGE``).
TWO_DIGIT_YEAR_FORMATS: tuple[str, ...] = ("d_mon_yy", "m/d/yy", "weekday_mm/dd/yy")


class DateExample(NamedTuple):
    source: str  # "3rd of March 1992"
    target: str  # "1992-03-03"
    format: str  # "dth_of_month_y"
    date: dt.date


def format_date(date: dt.date, fmt: str) -> str:
    """Render ``date`` in the format named ``fmt`` (one of ``DATE_FORMATS``)."""
    _check_formats([fmt])
    if fmt in TWO_DIGIT_YEAR_FORMATS and not (
        TWO_DIGIT_YEAR_RANGE[0] <= date.year <= TWO_DIGIT_YEAR_RANGE[1]
    ):
        raise ValueError(f"format {fmt!r} writes two-digit years; {date.year} is ambiguous")
    return _FORMATS[fmt][1](date)


def _check_formats(formats: Sequence[str]) -> None:
    if isinstance(formats, str):
        raise TypeError(f"formats must be a list of format names, got the string {formats!r}")
    if len(formats) == 0:
        raise ValueError("formats is empty; pass None for all formats")
    for name in formats:
        if name not in _FORMATS:
            close = difflib.get_close_matches(name, DATE_FORMATS, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"unknown date format {name!r}.{hint} Available: {', '.join(DATE_FORMATS)} "
                f"(or a group from DATE_ORDERS: {', '.join(DATE_ORDERS)})"
            )


def _filler_range(filler_words: int | tuple[int, int]) -> tuple[int, int]:
    low, high = (filler_words, filler_words) if isinstance(filler_words, int) else filler_words
    if not 0 <= low <= high:
        raise ValueError(f"filler_words must be n >= 0 or (low, high) with 0 <= low <= high, "
                         f"got {filler_words!r}")  # fmt: skip
    return low, high


def generate_date_examples(
    n: int,
    seed: int,
    formats: Sequence[str] | None = None,
    *,
    min_year: int = 1950,
    max_year: int = 2049,
    filler_words: int | tuple[int, int] = 0,
) -> list[DateExample]:
    """``n`` random dates (uniform over days of ``min_year``..``max_year``) in random formats.

    ``formats`` is a list of names from ``DATE_FORMATS`` and/or field orders (``"DMY"``,
    ``"MDY"``, ``"YMD"``, standing for all formats of ``DATE_ORDERS[order]``); None means all.
    ``filler_words`` adds that many (or a random number in ``(low, high)``) words from
    ``FILLER_WORDS`` before and after the date, without changing the target.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 1 <= min_year <= max_year <= 9999:
        raise ValueError(f"need 1 <= min_year <= max_year <= 9999, got {min_year}, {max_year}")
    if formats is None:
        formats = DATE_FORMATS
    else:
        if isinstance(formats, str):
            raise TypeError(f"formats must be a list of format names, got the string {formats!r}")
        # an order name ("DMY") stands for all formats of that order
        formats = tuple(f for name in formats for f in DATE_ORDERS.get(name, (name,)))
    _check_formats(formats)
    lo, hi = TWO_DIGIT_YEAR_RANGE
    if not (lo <= min_year and max_year <= hi) and set(formats) & set(TWO_DIGIT_YEAR_FORMATS):
        raise ValueError(
            f"two-digit-year formats {sorted(set(formats) & set(TWO_DIGIT_YEAR_FORMATS))} only "
            f"name years {lo}..{hi} unambiguously; narrow min_year/max_year or pass formats "
            f"without them, e.g. [f for f in DATE_FORMATS if f not in TWO_DIGIT_YEAR_FORMATS]"
        )
    low_fill, high_fill = _filler_range(filler_words)
    rng = random.Random(seed)
    first, last = dt.date(min_year, 1, 1).toordinal(), dt.date(max_year, 12, 31).toordinal()
    examples = []
    for _ in range(n):
        date = dt.date.fromordinal(rng.randint(first, last))
        fmt = rng.choice(formats)
        source = _FORMATS[fmt][1](date)
        n_fill = rng.randint(low_fill, high_fill)
        if n_fill:
            words = [rng.choice(FILLER_WORDS) for _ in range(n_fill)]
            before = rng.randint(0, n_fill)
            source = " ".join([*words[:before], source, *words[before:]])
        examples.append(DateExample(source, date.isoformat(), fmt, date))
    return examples


def generate_dates(
    n: int,
    seed: int,
    formats: Sequence[str] | None = None,
    *,
    min_year: int = 1950,
    max_year: int = 2049,
    filler_words: int | tuple[int, int] = 0,
) -> list[tuple[str, str]]:
    """``n`` pairs ``(human-readable date, ISO date)``; see :func:`generate_date_examples`."""
    examples = generate_date_examples(
        n, seed, formats, min_year=min_year, max_year=max_year, filler_words=filler_words
    )
    return [(e.source, e.target) for e in examples]


def date_source_vocab() -> Vocab:
    """Character vocabulary of the sources (``[PAD]`` = 0), the same for every data set."""
    return Vocab(SOURCE_CHARS)


def date_target_vocab() -> Vocab:
    """Character vocabulary of the ISO targets: digits and ``-`` after the special tokens."""
    return Vocab(TARGET_CHARS)


class DateDataset(Dataset):
    """``n`` date pairs as ``(src ids (T_src,), tgt ids (T_tgt,))`` LongTensors.

    Sources are plain characters; targets are ``[BOS] 1 9 9 2 - 0 3 - 0 3 [EOS]``. Use
    ``DataLoader(ds, batch_size=..., collate_fn=ds.collate)`` to get the dict described in
    :func:`course_lib.data.vocab.seq2seq_collate` (``src``, ``src_lengths``, ``tgt_in``,
    ``tgt_out``, ``tgt_lengths``). Keyword arguments are those of :func:`generate_date_examples`.
    """

    def __init__(self, n: int, seed: int, **kwargs: Any):
        self.examples = generate_date_examples(n, seed, **kwargs)
        self.src_vocab = date_source_vocab()
        self.tgt_vocab = date_target_vocab()
        self._src = [torch.tensor(self.src_vocab.encode(e.source)) for e in self.examples]
        self._tgt = [
            torch.tensor(self.tgt_vocab.encode(e.target, add_bos=True, add_eos=True))
            for e in self.examples
        ]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(e.source, e.target) for e in self.examples]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self._src[index], self._tgt[index]

    def collate(self, batch: Sequence[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
        return seq2seq_collate(
            batch, src_pad_id=self.src_vocab.pad_id, tgt_pad_id=self.tgt_vocab.pad_id
        )

    def decode_source(self, ids: Tensor | Sequence[int]) -> str:
        return self.src_vocab.decode_str(ids)

    def decode_target(self, ids: Tensor | Sequence[int]) -> str:
        """Characters of a (predicted) target, stopping at ``[EOS]``."""
        return self.tgt_vocab.decode_str(ids)
