"""The study registry: the papers' studies as plans, their reported results as records, and the recheck.

``registry/<study>/plan.toml`` is a preregistration (``docs/plan-format.md``); beside it,
``reported.toml`` (optional) is the record of what the paper printed for the study
(:mod:`.reported`). ``prereg registry`` lists the studies with their state (:mod:`.studies`);
``prereg recheck`` checks every recorded number against the paper's other printed numbers
(:mod:`.recheck`, :mod:`.relations`); ``prereg registry --coverage`` says which of the papers'
tables and figures the registry holds (:mod:`.coverage`). See ``docs/registry.md``.
"""

from __future__ import annotations

from .recheck import (
    STATUSES,
    CheckedRow,
    RecheckResult,
    check_endpoint,
    family_holm_ranges,
    recheck,
    recheck_endpoint,
    recheck_row,
    recheck_study,
)
from .relations import printed_interval
from .reported import (
    DZ_TEST_KEYS,
    REPORTED_FILE,
    TEST_KEYS,
    Amendment,
    Endpoint,
    EndpointCheck,
    Printing,
    Reported,
    ReportedRow,
    load_record_file,
    load_reported,
)
from .studies import StudyState, default_root, find_study, registry_states, study_dirs, study_state

__all__ = ["Reported", "ReportedRow", "Endpoint", "EndpointCheck", "printed_interval", "check_endpoint",
           "recheck_endpoint", "Amendment", "load_reported", "default_root", "study_dirs", "find_study",
           "StudyState", "study_state", "registry_states", "CheckedRow", "RecheckResult", "recheck_row", "recheck_study", "recheck", "REPORTED_FILE", "STATUSES", "TEST_KEYS",
           "DZ_TEST_KEYS", "Printing", "load_record_file", "family_holm_ranges"]
