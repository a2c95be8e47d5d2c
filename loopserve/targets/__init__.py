"""Where a planned run runs: the ``Target`` protocol and ``RunSpec`` (``base``), the simulator
(``sim``) and the real engine on wall-clock time (``real``, the user layer's one importer of
torch besides ``loopserve.calibrate``, loaded only through ``load``)."""
