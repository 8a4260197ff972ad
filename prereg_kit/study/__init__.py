"""A study's runs held to its plan: which runs it asks for (``jobs``), extra or missing runs
(``design``), the run audit (``audit``), ``prereg verify`` (``verify``), the runs an analysis
reads (``verified``) and where every run stands (``status``)."""
