"""What every study shares, re-exported from `studies.harness` (its modules by concept:
cells, provenance, jsonio, stats, tables, log). New code imports them from `studies.harness.*`."""

from studies.harness.cells import claimed as claimed, held as held
from studies.harness.jsonio import (
    finite_or_none as finite_or_none,
    load_json as load_json,
    nan_if_none as nan_if_none,
    write_json as write_json,
)
from studies.harness.log import log as log
from studies.harness.provenance import (
    commit_counts as commit_counts,
    environment as environment,
    git_commit as git_commit,
)
from studies.harness.stats import (
    at_or_below as at_or_below,
    ci_band as ci_band,
    paired as paired,
    t_interval as t_interval,
)
from studies.harness.tables import (
    fmt_delta as fmt_delta,
    fmt_mark as fmt_mark,
    fmt_value as fmt_value,
    md_table as md_table,
)
