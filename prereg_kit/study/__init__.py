"""A study's runs held to its plan: which runs it asks for (``jobs``), extra or missing runs
(``design``), the run audit (``audit``), ``prereg verify`` (``verify``) and where every run stands
(``status``); the runs an analysis reads are ``prereg_kit.analysis.runs``."""
