"""`loopserve report` of `bench serve` results: one page with each result's numbers and the
client-side TTFT / ITL figures drawn from the result's own per-request lists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from loopserve.bench.stub import Stub, running_stub
from loopserve.cli import main
from loopserve.report.bench import (
    BenchResult,
    itl_tail_figure,
    load_results,
    ttft_box_figure,
    ttft_over_time_figure,
)
from loopserve.report.sections import num
from loopserve.report.style import plt


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    with running_stub(Stub(itl_s=0.002)) as url:
        for label in ("first", "second"):
            assert main(["bench", "serve", "--base-url", url, "--dataset-name", "random",
                         "--num-prompts", "6", "--random-input-len", "4",
                         "--random-output-len", "5", "--request-rate", "200", "--label", label,
                         "--save-detailed", "--no-progress", "--result-dir", str(folder)]) == 0
    return folder


def test_a_folder_of_results_becomes_one_page(results: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(results)]) == 0
    assert capsys.readouterr().out.strip().endswith(f"report: {results / 'report.html'}")
    page = (results / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    for f in sorted(results.glob("*.json")):
        r = json.loads(f.read_text())
        row = re.search(rf"<td class=\"l\">{r['label']} \({f.stem}\)</td>(.*?)</tr>", page)
        assert row is not None
        cells = re.findall(r"<td class=\"\">(.*?)</td>", row.group(1))
        assert cells[:2] == [num(6.0), num(0.0)] and num(r["median_ttft_ms"]) in cells


def test_one_file_reports_beside_itself(results: Path) -> None:
    f = sorted(results.glob("first-*.json"))[0]
    assert main(["report", str(f)]) == 0
    assert f.with_suffix(".html").read_text().count("<img") == 3


def test_figures_plot_the_results_own_lists(results: Path) -> None:
    rs = load_results(results)
    fig = itl_tail_figure(rs)
    for line, r in zip(fig.axes[0].get_lines(), rs, strict=True):
        gaps = np.sort([g for gs in r.data["itls"] for g in gs]) * 1e3
        assert np.allclose(line.get_xdata(), gaps)
        assert np.allclose(line.get_ydata(), (gaps.size - np.arange(gaps.size)) / gaps.size)
    plt.close(fig)
    fig = ttft_over_time_figure(rs)
    for points, r in zip(fig.axes[0].collections, rs, strict=True):
        xy = points.get_offsets()
        assert np.allclose(xy[:, 0], r.data["start_times"])
        assert np.allclose(xy[:, 1], np.array(r.data["ttfts"]) * 1e3)
    plt.close(fig)


def test_results_without_detail_draw_a_note_not_a_plot(tmp_path: Path) -> None:
    bare = BenchResult(tmp_path / "r.json", "bare", {"completed": 1, "failed": 0,
                                                     "duration": 1.0})
    for make in (itl_tail_figure, ttft_box_figure, ttft_over_time_figure):
        fig = make([bare])
        assert not fig.axes[0].axison and "--save-detailed" in fig.axes[0].texts[0].get_text()
        plt.close(fig)


@pytest.mark.parametrize(("content", "message"), [
    ("[1, 2]", "is not a bench serve result"),
    ('{"completed": 1}', "is not a bench serve result"),
    ("{", "is not valid JSON"),
])
def test_a_file_that_is_no_result_is_one_line(content: str, message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text(content)
    assert main(["report", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopserve: error: RUN_DIR: ") and message in err
    assert err.count("\n") == 1 and not (tmp_path / "x.html").exists()
    assert main(["report", str(tmp_path)]) == 2  # a folder with no result in it
    err = capsys.readouterr().err
    assert err == f"loopserve: error: RUN_DIR: {tmp_path} holds no bench serve result (a " \
        "*.json with completed/failed/duration keys)\n"
    assert not (tmp_path / "report.html").exists()


def test_a_folder_leaves_out_other_json_and_says_so(results: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    for f in results.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    (tmp_path / "e2e.json").write_text('{"arms": {}}')
    assert main(["report", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ("report: left out 1 file(s) that are no bench serve result: "
                            "e2e.json\n")
    assert (tmp_path / "report.html").read_text().count("<td class=\"l\">") == 2
