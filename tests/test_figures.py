"""``linattn-numba figures``: merging the bench JSON, drawing every figure, rewriting the README's results section.

The inputs are derived from the committed H200 result (figures/data/h200_ladder.json) by perturbing its times and
adding records at more sequence lengths, so the code meets real record layouts (failed peers, the decode step,
the copy ceiling) and not values picked to pass.
"""

import copy
import json
import os

import numpy as np
import pytest

from linattn_numba import cli, figures

REAL = os.path.join(os.path.dirname(__file__), "..", "figures", "data", "h200_ladder.json")
README = ("# linattn-numba\n\nIntro text | with a pipe.\n\n## Results\n\n{start}\nstale table 1.234 ms\n{end}\n"
          "\nAfter.\n")


def _real():
    with open(REAL) as f:
        return json.load(f)


def _scaled(rec, factor, T=None):
    """A copy of ``rec`` whose time is multiplied by ``factor`` (rates recomputed), optionally at length T."""
    r = copy.deepcopy(rec)
    if T is not None:
        t0 = r["shape"]["T"]
        r["shape"]["T"] = T
        for k in ("counted_flops", "counted_bytes"):
            if k in r:
                r[k] *= T / t0
    if "median_ms" in r:
        for k in ("median_ms", "p10_ms", "p90_ms"):
            r[k] *= factor
        work = (T / t0) if T is not None else 1.0
        for k in ("tflops", "gbps"):
            if k in r:
                r[k] *= work / factor
    return r


def _write_data(tmp_path, seed=0):
    """Two files: 'old' = the real one with jittered times; 'new' (a later date) re-measures some records and adds
    T = 16384 and 65536, softmax SDPA, and an fp32_peak ceiling. Returns (data dir, old doc, new doc)."""
    rng = np.random.default_rng(seed)
    real = _real()
    old = copy.deepcopy(real)
    old["records"] = [_scaled(r, rng.uniform(0.9, 1.1)) for r in real["records"]]
    new = copy.deepcopy(real)
    new["date"] = "2030-01-01T00:00:00+00:00"
    new["git_sha"] = "feedfacecafe"
    std = [r for r in real["records"] if r.get("shape", {}).get("T") == 8192 and "median_ms" in r
           and r.get("recurrence") != "softmax"]
    recs = [_scaled(r, rng.uniform(1.2, 1.5)) for r in std if r["recurrence"] == "gated_delta"]  # re-measured
    for T in (16384, 65536):  # linear-time implementations: time grows ~T
        recs += [_scaled(r, T / 8192 * rng.uniform(0.95, 1.05), T=T) for r in std]
    sdpa_ms = 3.0 * rng.uniform(0.9, 1.1)
    for T in (8192, 16384, 65536):  # softmax: time grows ~T^2
        recs.append({"key": "torch_sdpa_causal", "kind": "peer", "recurrence": "softmax",
                     "shape": dict(B=4, T=T, H=16, K=128, V=128), "dtype": "float32",
                     "median_ms": sdpa_ms * (T / 8192) ** 2, "p10_ms": 0, "p90_ms": 0, "tflops": 100.0})
    recs.append({"key": "fp32_peak", "kind": "ceiling", "median_ms": 1.0, "tflops": 51.5 * rng.uniform(0.9, 1.1)})
    new["records"] = recs
    d = tmp_path / "data"
    d.mkdir()
    # the newer file sorts first by name: the merge must go by date, not by file name
    (d / "a_new.json").write_text(json.dumps(new))
    (d / "b_old.json").write_text(json.dumps(old))
    return d, old, new


def _readme(tmp_path, start=figures.MARK_START, end=figures.MARK_END):
    p = tmp_path / "README.md"
    p.write_text(README.format(start=start, end=end))
    return p


def _assert_png(path):
    from matplotlib import image

    assert os.path.getsize(path) > 10_000, path
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
    img = image.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 500, (path, img.shape)
    rgb = img[..., :3].reshape(-1, 3)
    assert rgb.std() > 0.05, f"{path} is (nearly) blank"
    assert len(np.unique((rgb * 255).astype(np.uint8), axis=0)) > 20, f"{path} has almost no drawing"


def test_merge_newest_file_wins(tmp_path):
    d, old, new = _write_data(tmp_path)
    data = figures.load(d)
    ids = [figures.identity(r) for r in data.records]
    assert len(ids) == len(set(ids))
    by_id = {figures.identity(r): r for r in data.records}
    for r in new["records"]:
        got = by_id[figures.identity(r)]
        assert got["_source"].endswith("a_new.json") and got.get("median_ms") == r.get("median_ms")
    new_ids = {figures.identity(r) for r in new["records"]}
    for r in old["records"]:
        if figures.identity(r) not in new_ids:
            assert by_id[figures.identity(r)]["_source"].endswith("b_old.json")
    assert [os.path.basename(s["path"]) for s in data.sources] == ["b_old.json", "a_new.json"]
    assert figures.ceilings(data)[2] == "measured"


def test_figures_and_readme(tmp_path):
    d, old, new = _write_data(tmp_path)
    readme = _readme(tmp_path)
    before = readme.read_text()
    out_dir = tmp_path / "figs"
    res = figures.make_figures(str(d), str(out_dir), str(readme), log=lambda *a: None)
    assert res["skipped"] == {}
    for name in figures.FIGURES:
        _assert_png(out_dir / name)

    text = readme.read_text()
    head, tail = before.split(figures.MARK_START)[0], before.split(figures.MARK_END)[1]
    assert text.startswith(head + figures.MARK_START) and text.endswith(figures.MARK_END + tail)
    section = text[len(head):len(text) - len(tail)]
    assert "stale table" not in section
    assert section.count("\n| ") == len(figures.load(d).records) + 1  # header + one row per merged record
    # numbers come from the data: a re-measured record shows the new file's time, not the old one's
    rec = next(r for r in new["records"] if r["key"] == "recurrent" and r["shape"]["T"] == 8192)
    old_rec = next(r for r in old["records"] if r["key"] == "recurrent" and r["recurrence"] == "gated_delta")
    assert f"| {rec['median_ms']:.4g} |" in section and f"| {old_rec['median_ms']:.4g} |" not in section
    assert "not timed: " in section  # peers that could not be timed stay visible
    assert "feedfacecafe" in section and "NVIDIA H200" in section
    # a second run changes nothing
    assert figures.update_readme(str(readme), figures.load(d)) is False
    assert readme.read_text() == text


def test_real_file_alone(tmp_path):
    """The committed data alone: one T, no long-context records -> that figure is skipped with a reason."""
    d = tmp_path / "data"
    d.mkdir()
    (d / "h200.json").write_text(json.dumps(_real()))
    res = figures.make_figures(str(d), str(tmp_path / "figs"), None, log=lambda *a: None)
    assert set(res["skipped"]) == {"long_context.png"}
    assert "T >= 65536" in res["skipped"]["long_context.png"]
    for p in res["written"]:
        _assert_png(p)
    assert figures.ceilings(figures.load(d))[1:] == (figures.DATASHEET_FP32_TFLOPS, "datasheet")


@pytest.mark.parametrize("which", ["start", "end", "both", "no file"])
def test_missing_markers_raise(tmp_path, which):
    d, _, _ = _write_data(tmp_path)
    if which == "no file":
        readme = tmp_path / "nope.md"
    else:
        readme = _readme(tmp_path, start="" if which in ("start", "both") else figures.MARK_START,
                         end="" if which in ("end", "both") else figures.MARK_END)
    before = readme.read_text() if readme.exists() else None
    with pytest.raises(figures.FiguresError, match="marker|cannot read"):
        figures.make_figures(str(d), str(tmp_path / "figs"), str(readme), log=lambda *a: None)
    assert not (tmp_path / "figs").exists()  # failed before drawing anything
    if before is not None:
        assert readme.read_text() == before


def test_cli(tmp_path, capsys):
    d, _, _ = _write_data(tmp_path)
    readme = _readme(tmp_path)
    assert cli.main(["figures", "--data", str(d), "--out", str(tmp_path / "f"), "--readme", str(readme)]) == 0
    assert (tmp_path / "f" / "ladder.png").exists()
    bad = _readme(tmp_path, start="")
    assert cli.main(["figures", "--data", str(d), "--out", str(tmp_path / "g"), "--readme", str(bad)]) == 1
    assert figures.MARK_START in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["figures", "--data", str(empty), "--no-readme"]) == 1
    assert "no *.json" in capsys.readouterr().err


def test_load_or_explain(tmp_path, capsys):
    """The notebooks' loader: None (and the reason printed) instead of an exception; the data when readable."""
    assert figures.load_or_explain(None) is None
    assert figures.load_or_explain(str(tmp_path)) is None
    assert "no *.json files" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text('{"no_records": 1}')
    assert figures.load_or_explain(str(tmp_path)) is None
    assert "not a bench result" in capsys.readouterr().out
    data = figures.load_or_explain(figures.find_data_dir())
    assert data is not None and data.records


def test_time_vs_T_follows_the_recurrence_measured_at_most_lengths(tmp_path):
    """A sweep of one recurrence over T (decay, B1 H16) beside a single standard-shape point of every recurrence:
    the time-vs-T figure draws the swept recurrence, not gated_delta's single point; with no sweep, gated_delta."""
    real = _real()
    std = [r for r in real["records"] if r.get("shape", {}).get("T") == 8192 and "median_ms" in r
           and r.get("recurrence") in figures.RECURRENCES]
    assert figures.sweep_recurrence(std) == "gated_delta"
    recs = list(std)
    for T in (1024, 4096, 16384):
        for r in std:
            if r["recurrence"] == "decay":
                x = _scaled(r, T / 8192, T=T)
                x["shape"]["B"], x["shape"]["H"] = 1, 16
                recs.append(x)
    assert figures.sweep_recurrence(recs) == "decay"
    d = tmp_path / "data"
    d.mkdir()
    (d / "x.json").write_text(json.dumps(dict(real, records=recs)))
    path, why = figures.plot_time_vs_T(figures.load(str(d)), str(tmp_path / "t.png"))
    assert why is None and os.path.getsize(path) > 1000


def test_tune_keeps_each_kernels_newest_sweep(tmp_path):
    """A newer file that swept only the decode step (bench --tune step) keeps the older file's sequence sweep."""
    real = _real()
    old = dict(real, date="2029-01-01T00:00:00+00:00",
               tune=[{"key": "recurrent", "cols": 2, "nw": 8, "median_ms": 4.0},
                     {"key": "step", "sw": 8, "cs": 4, "smb": 2, "median_ms": 0.2}])
    new = dict(real, date="2030-01-01T00:00:00+00:00",
               tune=[{"key": "step", "sw": 8, "cs": 4, "smb": 2, "vec": 1, "median_ms": 0.14}])
    d = tmp_path / "data"
    d.mkdir()
    (d / "old.json").write_text(json.dumps(old))
    (d / "new.json").write_text(json.dumps(new))
    tune = figures.load(str(d)).tune
    assert [t["median_ms"] for t in tune] == [4.0, 0.14]


def test_fp32_share_column(tmp_path):
    """With an ``fp32_peak`` record, each FMA rung's row carries its TFLOP/s as a share of that measured rate (peers,
    ceilings and the tensor-core rungs leave the cell empty); without one, the share is of the datasheet rate, and
    the note says so."""
    d, _, _ = _write_data(tmp_path)
    data = figures.load(d)
    peak = next(r for r in data.records if r["key"] == "fp32_peak")["tflops"]
    rungs = [r for r in data.records if r.get("kind") == "rung" and figures.timed(r) and r.get("tflops")]
    fma = next(r for r in rungs if r["key"] not in figures.TENSOR_CORE_RUNGS)
    tc = dict(fma, key=figures.TENSOR_CORE_RUNGS[-1])  # the same rates under a tensor-core rung's name
    data.records.append(tc)
    text = figures.results_markdown(data)
    assert "| of fp32 FMA |" in text and f"the {peak:.1f} TFLOP/s" in text
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[1] in ("rung", "peer", "ceiling"):
            rows.setdefault((cells[0], cells[1], cells[2], cells[3]), cells)
    cell = lambda r: rows[(r["key"], "rung", r["recurrence"], figures.shape_str(figures.shape_tuple(r)))][7]  # noqa
    assert cell(fma) == f"{100 * fma['tflops'] / peak:.0f} %" and cell(tc) == ""
    assert all(c[7] == "" for k, c in rows.items() if k[1] != "rung")
    # the committed data alone has no fp32_peak: the datasheet rate, named as such
    d2 = tmp_path / "only_real"
    d2.mkdir()
    (d2 / "h200.json").write_text(json.dumps(_real()))
    text2 = figures.results_markdown(figures.load(d2))
    assert f"{figures.DATASHEET_FP32_TFLOPS:.0f} TFLOP/s fp32 datasheet rate" in text2
