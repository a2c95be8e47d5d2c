"""``make gpu-check`` (``python -m tools.gpu``): one prepared script that turns a rare GPU
lease into measured results.

Stages, in order, each time-capped and failure-isolated (a failing stage is reported and the
next one runs; the exit status is non-zero at the end if any failed):

1. ``wheels``    install carried wheels (``.whl/``, ``make gpu-wheels``) into /tmp/site, check
                 the imports the project needs;
2. ``env``       GPU name, memory, driver, torch/triton/python versions, commit -> env.json;
3. ``ceilings``  device-to-device copy bandwidth and a bf16 matmul (CUDA events);
4. ``pytest``    ``pytest -m gpu``;
5. ``core``      recurrent core call time at 1/8/32 decode rows against the weight floor;
   ``fa4``, ``graphs``, ``graph_tokens`` (and ``graph_runs`` after ``runs``): the GPU path,
                 flash_attn_4 and CUDA graphs against eager (skipped in the dry run);
6. ``runs``      ``loopserve run scenarios/gpu-check.yaml`` on the device and in simulation,
                 then ``loopserve report`` of both, packed as runs.tar.gz;
7. ``calibrate`` ``loopserve calibrate`` when the command exists.

Results go to ``$OUT`` when set, else ``results/gpu/<date>/`` (``results/gpu-dryrun/`` for the
CPU dry run), within the device machine's limits (8 files, 16 MiB each, 2 folders deep); a
short table is printed last. ``--device cpu`` is the dry run: the same stages with the
``tiny`` model and tiny sizes, run by CI through tests/tools/test_gpu_check.py.

The script itself uses the standard library only; torch and the project run in subprocesses.
Modules: ``check`` (the driver and the command line), ``context`` (the running ``Check``),
``stages`` (the stage table) with ``setup_stages``, ``device_stages`` and ``project_stages``,
``measure`` (the device measurements' entry point, torch) with ``facts``, ``ceilings``,
``core``, ``sizes`` and ``timing``, plus ``proc``, ``outputs`` and ``wheels``; the GPU path's
``graph_stages``, ``graph_measure`` (torch) with ``graphs``, ``graph_table`` and ``wheel_split``.
"""

