"""The sample CSV is deterministic and has the shapes the demo and the tests rely on."""

import csv
import io
import re

import pytest

from devstack.sample_csv import generate_csv, generate_export_csv, generate_quoted_csv
from services import csvstats


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_bytes():
    assert generate_csv(2000, seed=3) == generate_csv(2000, seed=3)
    assert generate_csv(2000, seed=3) != generate_csv(2000, seed=4)


def test_the_sample_has_empty_values_negatives_and_quoted_multiline_fields():
    data = generate_csv(5000, seed=1)
    totals = csvstats.sequential_totals(data, "value")
    assert totals.count < 5000  # some values are empty
    assert totals.min < 0
    assert b'"first line\r\nsecond' in data or b'"first line\nsecond' in data
    assert csvstats.split(data, "value", ",", 1).records == 5000


def test_a_malformed_record_is_reported_where_it_was_put():
    data = generate_csv(300, seed=2, malformed_at=123)
    with pytest.raises(csvstats.BadRecord) as error:
        csvstats.sequential_totals(data, "value")
    assert error.value.record.record == 123


def test_the_quoted_sample_is_deterministic_for_a_seed():
    assert generate_quoted_csv(2000, seed=3) == generate_quoted_csv(2000, seed=3)
    assert generate_quoted_csv(2000, seed=3) != generate_quoted_csv(2000, seed=4)


def test_the_quoted_sample_has_the_shape_of_issue_15():
    records = 20_000
    data = generate_quoted_csv(records, seed=5)
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    assert rows[0] == ["id", "name", "value", "comment"]
    assert len(rows) == records + 1
    texts = [field for row in rows[1:] for field in (row[1], row[3])]
    # The id is never quoted, so every quoted field opens just after a delimiter.
    quoted_values = len(re.findall(rb',"-?[0-9]+",', data))
    quoted_texts = data.count(b',"') - quoted_values
    assert 0.22 < quoted_texts / len(texts) < 0.28
    special = [t for t in texts if "," in t and '"' in t and "\n" in t]
    assert 0.12 < len(special) / quoted_texts < 0.18
    assert b'\r\nx"' in data and b'\nx"' in data
    values = [row[2] for row in rows[1:]]
    assert 0.04 < sum(not v.strip(" \t") for v in values) / records < 0.06
    assert any(v != v.strip(" \t") and v.strip(" \t") for v in values)
    assert 0.03 < quoted_values / records < 0.07
    assert csvstats.split(data, "value", ",", 8).records == records
    assert csvstats.sequential_totals(data, "value").count > 0.9 * records


def test_the_quoted_sample_at_full_size_is_about_36_mib():
    size = len(generate_quoted_csv(50_000, seed=20261203)) * 20
    assert 34 << 20 < size < 38 << 20


def test_the_export_sample_has_a_multiline_quoted_field_in_about_30_percent_of_records():
    records = 20_000
    data = generate_export_csv(records, seed=5)
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    assert rows[0] == ["id", "name", "value", "comment"]
    assert len(rows) == records + 1
    special = [r for r in rows[1:] if any("," in f and '"' in f and "\n" in f for f in r)]
    assert 0.28 < len(special) / records < 0.32
    assert b'\r\nx"' in data and b'\nx"' in data
    values = [row[2] for row in rows[1:]]
    assert 0.04 < sum(not v.strip(" \t") for v in values) / records < 0.06
    assert csvstats.split(data, "value", ",", 8).records == records
    assert generate_export_csv(2000, seed=3) == generate_export_csv(2000, seed=3)
