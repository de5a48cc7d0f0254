"""The dates task: every target is the ISO form of the date the source names.

The sources are parsed here independently of course_lib, with ``datetime.strptime``.
"""

import calendar
import datetime as dt
import re

import pytest
import torch
from torch.utils.data import DataLoader

from course_lib.data import (
    DATE_FORMATS,
    DATE_ORDERS,
    TWO_DIGIT_YEAR_FORMATS,
    DateDataset,
    format_date,
    generate_date_examples,
    generate_dates,
)
from course_lib.data.dates import FILLER_WORDS, MONTHS, ordinal

# format name -> strptime pattern (applied after ordinal suffixes are removed)
PATTERNS = {
    "d_month_y": "%d %B %Y",
    "dth_of_month_y": "%d of %B %Y",
    "the_dth_of_month_y": "the %d of %B, %Y",
    "d_mon_yy": "%d %b %y",
    "dd.mm.yyyy": "%d.%m.%Y",
    "dd-mm-yyyy": "%d-%m-%Y",
    "weekday_d_month_y": "%A %d %B %Y",
    "verbose": "on the %d day of %B in the year %Y",
    "month_d_y": "%B %d, %Y",
    "mon_d_y": "%b %d, %Y",
    "month_dth_y": "%B %d, %Y",
    "MON_D_YYYY": "%b %d %Y",
    "mm/dd/yyyy": "%m/%d/%Y",
    "m/d/yy": "%m/%d/%y",
    "weekday_mm/dd/yy": "%A %m/%d/%y",
    "weekday_month_d_y": "%A, %B %d, %Y",
    "y_month_d": "%Y %B %d",
    "y_mon_d": "%Y %b %d",
    "y_month_dth": "%Y, %B %d",
    "yyyy/mm/dd": "%Y/%m/%d",
    "yyyymmdd": "%Y%m%d",
}


def parse(source: str, fmt: str) -> dt.date:
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", r"\1", source)
    date = dt.datetime.strptime(text, PATTERNS[fmt]).date()
    if "%y" in PATTERNS[fmt] and date.year >= 2050:  # strptime pivots at 69, the data set at 50
        date = date.replace(year=date.year - 100)
    if "%A" in PATTERNS[fmt]:  # strptime ignores the weekday; check it separately
        weekday = source.split()[0].strip(",")
        assert weekday.lower() == calendar.day_name[date.weekday()].lower(), source
    return date


def test_every_format_has_an_independent_parser():
    assert set(PATTERNS) == set(DATE_FORMATS)
    assert sorted(f for group in DATE_ORDERS.values() for f in group) == sorted(DATE_FORMATS)


@pytest.mark.parametrize("fmt", DATE_FORMATS)
def test_targets_equal_the_parsed_source(fmt):
    for e in generate_date_examples(60, seed=7, formats=[fmt]):
        assert e.format == fmt
        assert dt.date.fromisoformat(e.target).isoformat() == e.target  # a valid calendar date
        assert parse(e.source, fmt) == dt.date.fromisoformat(e.target) == e.date, e


def test_determinism_and_year_range():
    a = generate_dates(300, seed=0)
    assert a == generate_dates(300, seed=0)
    assert a != generate_dates(300, seed=1)
    years = [int(t[:4]) for _, t in generate_dates(300, seed=2, min_year=2001, max_year=2003)]
    assert min(years) >= 2001 and max(years) <= 2003 and len(set(years)) == 3
    formats = {e.format for e in generate_date_examples(500, seed=3)}
    assert formats == set(DATE_FORMATS)  # all formats are used by default


def test_ordinals_and_known_examples():
    expected = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th",
                21: "21st", 22: "22nd", 23: "23rd", 30: "30th", 31: "31st"}  # fmt: skip
    assert {n: ordinal(n) for n in expected} == expected
    tuesday = dt.date(1992, 3, 3)
    assert format_date(tuesday, "weekday_mm/dd/yy") == "tuesday 03/03/92"
    assert format_date(tuesday, "dth_of_month_y") == "3rd of March 1992"
    assert format_date(tuesday, "mon_d_y") == "Mar 3, 1992"
    assert format_date(dt.date(2049, 1, 2), "m/d/yy") == "1/2/49"
    assert format_date(dt.date(1950, 1, 2), "m/d/yy") == "1/2/50"
    with pytest.raises(ValueError, match="two-digit"):
        format_date(dt.date(2050, 1, 2), "m/d/yy")


@pytest.mark.parametrize("order", ["DMY", "MDY", "YMD"])
def test_orders_put_the_fields_where_they_say(order):
    date = dt.date(1992, 3, 25)  # day, month, year all distinguishable
    for fmt in DATE_ORDERS[order]:
        source = format_date(date, fmt)
        year = source.find("1992") if "1992" in source else source.rfind("92")
        day = source.find("25")
        month = source.lower().find("mar")
        if month < 0:  # numeric month: the first "3" that is not part of the day
            month = source.find("3")
        found = "".join(k for _, k in sorted([(day, "D"), (month, "M"), (year, "Y")]))
        assert found == order, (fmt, source)


def test_filler_words_make_longer_sources_with_the_same_target():
    plain = generate_date_examples(50, seed=4)
    padded = generate_date_examples(50, seed=4, filler_words=(3, 6))
    for e in padded:
        rendered = format_date(e.date, e.format)
        assert rendered in e.source and e.target == e.date.isoformat()
        extra = e.source.replace(rendered, " ").split()
        assert 3 <= len(extra) <= 6 and set(extra) <= set(FILLER_WORDS)
    assert sum(len(e.source) for e in padded) > sum(len(e.source) for e in plain) + 50 * 8
    # filler words never look like a month or weekday
    names = [m[:3].lower() for m in MONTHS] + [d[:3].lower() for d in calendar.day_name]
    assert not any(name in word for word in FILLER_WORDS for name in names)


def test_dataset_and_collate():
    ds = DateDataset(64, seed=5, filler_words=(0, 2))
    src, tgt = ds[0]
    assert src.dtype == torch.long and tgt.dtype == torch.long
    assert tgt[0] == ds.tgt_vocab.bos_id and tgt[-1] == ds.tgt_vocab.eos_id and len(tgt) == 12
    assert ds.decode_source(src) == ds.examples[0].source
    assert ds.decode_target(tgt) == ds.examples[0].target
    batch = next(iter(DataLoader(ds, batch_size=16, collate_fn=ds.collate)))
    assert batch["src"].shape == (16, int(batch["src_lengths"].max()))
    assert batch["tgt_in"].shape == batch["tgt_out"].shape == (16, 11)
    assert (batch["tgt_lengths"] == 11).all()
    for row, length, example in zip(batch["src"], batch["src_lengths"], ds.examples):
        assert ds.decode_source(row[:length]) == example.source
        assert (row[length:] == ds.src_vocab.pad_id).all()
    assert all(ds.decode_target(row) == e.target for row, e in zip(batch["tgt_out"], ds.examples))


def test_bad_arguments():
    with pytest.raises(ValueError, match="Did you mean 'mon_d_y'"):
        generate_dates(5, 0, formats=["mon_d_yy"])
    with pytest.raises(TypeError, match="list of format names"):
        generate_dates(5, 0, formats="mon_d_y")
    with pytest.raises(ValueError, match="two-digit"):
        generate_dates(5, 0, min_year=1900)
    four_digit = [f for f in DATE_FORMATS if f not in TWO_DIGIT_YEAR_FORMATS]
    assert len(generate_dates(5, 0, formats=four_digit, min_year=1800, max_year=2200)) == 5
    with pytest.raises(ValueError, match="min_year"):
        generate_dates(5, 0, min_year=2000, max_year=1999)
    with pytest.raises(ValueError, match="non-negative"):
        generate_dates(-1, 0)
    with pytest.raises(ValueError, match="filler_words"):
        generate_dates(5, 0, filler_words=(3, 1))


def test_order_names_select_their_formats():
    examples = generate_date_examples(200, seed=6, formats=["YMD", "dd.mm.yyyy"])
    assert {e.format for e in examples} == {*DATE_ORDERS["YMD"], "dd.mm.yyyy"}
