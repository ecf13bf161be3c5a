"""The sample CSV is deterministic and has the shapes the demo and the tests rely on."""

import pytest

from devstack.sample_csv import generate_csv
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
