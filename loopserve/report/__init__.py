"""report.html of one or more run folders: the page (``page``), its figures (``plots``, the
step ``timeline``) and the comparisons it states (``compare``: arm ratios, which option is
better on which metric)."""
