"""The installed package's metadata: its license, the license text, who wrote it, and one
HTTP client in the dev extra.

Read from the interpreter's site-packages: an editable build also leaves a
``loopserve.egg-info`` in the source tree, which shadows the installed metadata on a path
that starts with the repository, and carries no license files."""

from __future__ import annotations

import sysconfig
from importlib.metadata import Distribution, distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def installed() -> Distribution:
    """The loopserve that pip installed into this interpreter."""
    site = sysconfig.get_path("purelib")
    (dist,) = distributions(name="loopserve", path=[site])
    return dist


def test_metadata_names_the_license_and_ships_its_text() -> None:
    dist = installed()
    meta = dist.metadata
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in meta.get_all("License-File", [])
    shipped = dist.read_text("licenses/LICENSE")
    assert shipped is not None and shipped == (ROOT / "LICENSE").read_text()
    assert shipped.lstrip().startswith("Apache License\n")
    assert "Copyright The loopserve authors" in shipped


def test_metadata_describes_the_project() -> None:
    meta = installed().metadata
    assert meta["Author"] == "The loopserve authors"
    assert meta["Summary"]
    classifiers = meta.get_all("Classifier", [])
    for version in ("3.11", "3.12"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    # PEP 639: the license expression replaces the License :: classifiers.
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert "serving" in meta["Keywords"].split(",")


def test_the_dev_extra_brings_one_http_client() -> None:
    reqs = [Requirement(r) for r in installed().requires or []]
    dev = {r.name for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "dev"})}
    assert "httpx2" in dev and "httpx" not in dev
