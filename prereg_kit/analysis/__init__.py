"""A locked plan and its runs read as planned: ``analyze`` (plan × runs → results, ``pk.analyze``),
the runs it reads (``runs``), each contrast's statistics and verdicts (``verdicts``, ``robustness``,
``designs``, ``extrapolated``), sequential looks (``looks``), manipulation checks (``checks``),
sealed gradient tests (``gradient``), rliable's task aggregates (``aggregates``) and the
notebook display (``notebook``)."""
