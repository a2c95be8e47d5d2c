"""report.html of one or more run folders: the page and its template (``page``,
``templates/``), its sections as data (``sections``; ``cluster`` for runs with a cluster), the
comparisons they state (``compare``), the figures (``figures``, the step ``timeline``) and
their shared look (``style``); ``bench`` is the page of ``loopserve bench serve`` results.
``templates/`` also holds the page of ``loopserve fidelity`` (``loopserve.fidelity.report``)."""
