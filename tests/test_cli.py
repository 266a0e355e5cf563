"""The softdtw command line end to end: every command runs and writes its files."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from softdtw import cli

DATA = Path(__file__).parent / "data"
SMALL_DEMO = ["demo", "--n-train", "9", "--n-test", "9", "--length", "32", "--kmeans-iter", "2",
              "--barycenter-iter", "4", "--no-progress"]


@pytest.mark.parametrize("command", ["demo", "align", "search", "cluster", "bench"])
def test_help_of_every_command(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    assert f"usage: softdtw {command}" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_demo_writes_table_and_figures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    assert cli.main(SMALL_DEMO + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in ("1-NN classification", "DTW (γ=0)", "Euclidean", "class barycenters", "ARI", "accuracy"):
        assert needle in text
    for name in ("barycenters.png", "kmeans.png", "alignment.png"):
        assert (out / name).stat().st_size > 1000
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_without_matplotlib_says_how_to_get_figures(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out = tmp_path / "demo"
    assert cli.main(SMALL_DEMO + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "figures skipped" in text and 'pip install "softdtw[plot]"' in text
    assert not out.exists()


def test_plotting_raises_a_helpful_import_error(monkeypatch):
    from softdtw import plotting
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'pip install "softdtw\[plot\]"'):
        plotting.plot_alignment(np.zeros(3), np.zeros(4))


def test_align_csv_npy_and_ucr_line(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = tmp_path / "a.csv"
    a.write_text("value\n0\n1\n2\n3\n2\n")
    b = tmp_path / "b.npy"
    np.save(b, np.array([0.0, 0.0, 1.0, 3.0, 3.0, 2.0, 2.0]))
    png, path_csv = tmp_path / "al.png", tmp_path / "path.csv"
    assert cli.main(["align", str(a), str(b), "--gamma", "0.5", "--out", str(png), "--path-csv", str(path_csv)]) == 0
    text = capsys.readouterr().out
    assert "soft-DTW (γ=0.5)" in text and "DTW = 1" in text
    assert png.read_bytes()[:4] == b"\x89PNG"
    rows = np.loadtxt(path_csv, delimiter=",", skiprows=1, dtype=int)
    assert rows[0].tolist() == [0, 0] and rows[-1].tolist() == [4, 6]
    # One line of a UCR file against a one-row CSV, no figure.
    row = tmp_path / "row.csv"
    row.write_text("1,2,3,4,5\n")
    assert cli.main(["align", f"{DATA / 'uni_equal.ts'}:1", str(row), "--no-figure"]) == 0
    assert "DTW = " in capsys.readouterr().out


@pytest.mark.parametrize("args, match", [
    (["align", "nope.csv", "nope.npy"], "no such file"),
    (["align", str(DATA / "uni_equal.ts"), str(DATA / "uni_equal.ts")], r"pick one with .*uni_equal.ts:INDEX"),
    (["align", f"{DATA / 'uni_equal.ts'}:7", f"{DATA / 'uni_equal.ts'}:0"], "index 7 out of range; the file has 3"),
    (["cluster", str(DATA / "uni_equal.ts"), "-k", "5"], "between 1 and the number of series"),
    (["cluster", "missing.tsv", "-k", "2"], "no such file"),
    (["cluster", str(DATA), "-k", "2"], r"data: is a directory; give one file"),
    (["align", str(DATA), str(DATA / "uni_equal.ts")], r"data: is a directory; give one file"),
])
def test_errors_are_one_line_with_status_2(args, match, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"softdtw {args[0]}: error:")
    assert __import__("re").search(match, err), err


@pytest.mark.parametrize("make, args, match", [
    (lambda d: (d / "x.ts").write_bytes(b"\x93NUMPY\x82\x00"), ["cluster", "{d}/x.ts", "-k", "2"],
     r"x.ts: not a text file \(byte 0x93 is not UTF-8\)"),
    (lambda d: (d / "x.csv").write_bytes(b"\x82\xff\x00"), ["cluster", "{d}/x.csv", "-k", "2"],
     r"x.csv: not a text file"),
    (lambda d: (d / "x.npy").write_bytes(b"garbage, not numpy"), ["align", "{d}/x.npy", "{d}/x.npy"],
     r"x.npy: not a readable .npy array"),
    (lambda d: np.save(d / "o.npy", np.array([{"a": 1}], dtype=object)), ["align", "{d}/o.npy", "{d}/o.npy"],
     r"o.npy: not a readable .npy array"),
    (lambda d: None, ["align", "a", "b", "--gamma", "sharp"], r"argument --gamma: expected a number >= 0 or 'auto'"),
])
def test_unreadable_inputs_are_named(tmp_path, capsys, make, args, match):
    make(tmp_path)
    args = [a.format(d=tmp_path) for a in args]
    if "--gamma" in args:
        with pytest.raises(SystemExit):
            cli.main(args)
    else:
        assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(match, err), err


def _printed(text, pattern):
    import re
    return float(re.search(pattern + r" = (\S+)", text).group(1))


def test_align_gamma_auto_keeps_soft_dtw_near_dtw(tmp_path, capsys):
    # Two warped smooth curves, z-normalised by --standardize: the case where gamma = 1 gives
    # soft-DTW = -243 beside DTW = 0.94 (the entropy of the ~10^100 paths dominates).
    t = np.linspace(0, 1, 150)
    a = np.exp(-((t - 0.4) / 0.1) ** 2) + 0.3 * np.sin(6 * t)
    b = np.exp(-((t ** 1.3 - 0.45) / 0.1) ** 2) + 0.3 * np.sin(6 * t ** 1.1)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    assert cli.main(["align", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--standardize", "--no-figure"]) == 0
    text = capsys.readouterr().out
    assert "(auto)" in text
    sd, dtw = _printed(text, r"soft-DTW \(.*?\)"), _printed(text, "   DTW")
    assert 0 < dtw and (1 - 0.11) * dtw <= sd <= dtw, text
    assert cli.main(["align", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--standardize", "--no-figure",
                     "--gamma", "1"]) == 0
    assert _printed(capsys.readouterr().out, r"soft-DTW \(γ=1\)") < -100


def test_cluster_and_demo_take_gamma_auto(tmp_path, capsys):
    out = tmp_path / "cl"
    assert cli.main(["cluster", str(DATA / "uni_unequal_missing.ts"), "-k", "2", "--max-iter", "2",
                     "--barycenter-iter", "2", "--out", str(out), "--no-progress", "--no-figure",
                     "--gamma", "auto"]) == 0
    assert "gamma auto: " in capsys.readouterr().out
    assert cli.main(SMALL_DEMO + ["--no-figures", "--gamma", "auto"]) == 0
    assert "(auto)" in capsys.readouterr().out


def test_cluster_ucr_file_writes_labels_centers_and_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "cl"
    assert cli.main(["cluster", str(DATA / "uni_unequal_missing.ts"), "-k", "2", "--max-iter", "3",
                     "--barycenter-iter", "3", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "adjusted Rand index" in text and "inertia" in text
    rows = np.loadtxt(out / "labels.csv", delimiter=",", skiprows=1, dtype=int)
    assert rows.shape == (4, 3) and set(rows[:, 1]) <= {0, 1}
    C = np.load(out / "centers.npy")  # each centre at its cluster's median member length, NaN-padded
    assert C.shape[0] == 2 and C.shape[2] == 1 and C.shape[1] <= 6
    assert "centre lengths [" in text
    assert (out / "centers.png").read_bytes()[:4] == b"\x89PNG"


def test_cluster_npy_without_labels(tmp_path, capsys):
    from softdtw.datasets import make_cbf
    X, _ = make_cbf(12, 24, seed=0)
    f = tmp_path / "x.npy"
    np.save(f, X[..., 0].numpy())
    out = tmp_path / "cl"
    assert cli.main(["cluster", str(f), "-k", "3", "--max-iter", "2", "--barycenter-iter", "2", "--out", str(out),
                     "--no-figure", "--standardize", "--no-progress"]) == 0
    assert "adjusted Rand" not in capsys.readouterr().out
    assert np.loadtxt(out / "labels.csv", delimiter=",", skiprows=1).shape == (12, 2)


def test_cluster_nan_padded_npy(tmp_path, capsys):
    from softdtw.datasets import make_cbf
    X, _ = make_cbf(12, 24, seed=0)
    arr = X.numpy().copy()
    arr[::2, 16:] = np.nan  # tslearn's to_time_series_dataset layout: half the series have 16 steps
    np.save(tmp_path / "x.npy", arr)
    out = tmp_path / "cl"
    assert cli.main(["cluster", str(tmp_path / "x.npy"), "-k", "2", "--max-iter", "2", "--barycenter-iter", "2",
                     "--out", str(out), "--no-figure", "--standardize", "--no-progress"]) == 0
    C = np.load(out / "centers.npy")  # centres at their clusters' median lengths (16 or 24), NaN-padded after
    n = (~np.isnan(C[:, :, 0])).sum(1)
    assert set(n.tolist()) <= set(range(16, 25)) and C.shape[1] == n.max()
    assert all(np.isfinite(C[k, :n[k]]).all() and np.isnan(C[k, n[k]:]).all() for k in range(2))
    arr[1, 3, 0] = np.nan
    np.save(tmp_path / "bad.npy", arr)
    assert cli.main(["cluster", str(tmp_path / "bad.npy"), "-k", "2"]) == 2
    assert "bad.npy contains NaN values inside series 1 (step 3" in capsys.readouterr().err


def test_bench_outside_a_checkout_says_so(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_checkout_root", lambda: None)
    assert cli.main(["bench"]) == 1
    assert "source checkout" in capsys.readouterr().out


def test_bench_runs_the_script_for_the_device(monkeypatch, tmp_path, capsys):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "cpu.py").write_text("import sys; print('BENCH', sys.argv[1:])\n")
    (tmp_path / "benchmarks" / "gpu.py").write_text("import sys; print('BENCH', sys.argv[1:])\n")
    monkeypatch.setattr(cli, "_checkout_root", lambda: tmp_path)
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: calls.append((cmd, kw)) or 0)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli.main(["bench", "--quick"]) == 0
    cmd, kw = calls[0]
    assert cmd[0] == sys.executable and cmd[1].endswith(("cpu.py", "gpu.py")) and cmd[-1] == "--quick"
    # Default: a new timestamped file in the working directory, not benchmarks/results/.
    out = Path(cmd[cmd.index("--out") + 1])
    assert out.parent == work and re.fullmatch(r"softdtw-bench-(cpu|gpu)-\d{8}-\d{6}\.json", out.name)
    assert kw["cwd"] == str(work)
    assert "results to " + str(out) in capsys.readouterr().out
    # --out, relative to the working directory.
    assert cli.main(["bench", "--out", "mine/b.json", "--smoke"]) == 0
    cmd, _ = calls[1]
    assert cmd[cmd.index("--out") + 1] == str(work / "mine" / "b.json") and cmd[-1] == "--smoke"


def _load_cpu_bench(monkeypatch, tslearn_installed):
    """benchmarks/cpu.py as a fresh module (tslearn hidden when not tslearn_installed)."""
    import importlib.util

    if not tslearn_installed:
        for name in [m for m in sys.modules if m == "tslearn" or m.startswith("tslearn.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "tslearn", None)
        monkeypatch.setitem(sys.modules, "tslearn.metrics", None)
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cpu.py"
    spec = importlib.util.spec_from_file_location("_bench_cpu_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tslearn_installed", [True, False])
def test_cpu_bench_smoke_run_writes_where_asked_and_shows_rows(monkeypatch, tmp_path, capsys, tslearn_installed):
    if tslearn_installed:
        pytest.importorskip("tslearn")
    bench = _load_cpu_bench(monkeypatch, tslearn_installed)
    out = tmp_path / "r" / "cpu.json"
    bench.main(["--smoke", "--out", str(out)])
    text = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert out.with_suffix(".md").is_file()
    impls = {r["impl"] for r in rows}
    assert "softdtw.soft_dtw (cpu backend)" in impls and "softdtw backends.cpu forward(memory='none')" in impls
    assert ("tslearn cdist_soft_dtw" in impls) == tslearn_installed
    # Each row is printed as it is measured, before the final table.
    assert text.index("softdtw backends.cpu forward+backward") < text.index("# CPU benchmark")
    missing = "tslearn is not available"
    assert (missing in text) != tslearn_installed
    if not tslearn_installed:
        line = next(t for t in text.splitlines() if missing in t)
        assert "pip install tslearn" in line and "Traceback" not in text
        assert all(r["ratio_vs_tslearn"] is None for r in rows)


def test_python_dash_m_softdtw():
    src = str(Path(__file__).resolve().parents[1] / "src")
    r = subprocess.run([sys.executable, "-m", "softdtw", "--version"], capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": src})
    assert r.returncode == 0 and r.stdout.startswith("softdtw ")


@pytest.mark.parametrize("script, args", [
    ("forecasting.py", ["--steps", "15"]),
    ("barycenter_clustering.py", ["--n", "24", "--max-iter", "5"]),
    ("dilate_forecasting.py", ["--steps", "10"]),
    ("search_motifs.py", ["--length", "6000"]),
])
def test_examples_run(script, args, tmp_path):
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "examples" / script), *args, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(root / "src")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "figure" in r.stdout


def test_search_prints_matches_csv_and_figure(tmp_path, capsys):
    rng = np.random.default_rng(0)
    pattern = np.sin(np.linspace(0, 2 * np.pi, 12))
    series = 0.05 * rng.normal(size=200)
    series[40:52] += pattern
    series[150:162] += pattern
    np.save(tmp_path / "q.npy", pattern)
    (tmp_path / "s.csv").write_text("value\n" + "\n".join(f"{v:.17g}" for v in series) + "\n")
    args = ["search", str(tmp_path / "q.npy"), str(tmp_path / "s.csv"), "-k", "2", "--csv", str(tmp_path / "m.csv")]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "| rank | start | end" in text and "exclusion 6" in text
    rows = np.loadtxt(tmp_path / "m.csv", delimiter=",", skiprows=1)
    assert sorted(rows[:, 1].astype(int).tolist()) == pytest.approx([51, 161], abs=1)
    assert np.all(rows[:, 2] < 0.2)
    if importlib.util.find_spec("matplotlib") is not None:
        png = tmp_path / "fig" / "m.png"
        assert cli.main(args + ["--plot", str(png)]) == 0
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_search_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    np.save(tmp_path / "q.npy", np.zeros(3))
    np.save(tmp_path / "s.npy", np.zeros(20))
    assert cli.main(["search", str(tmp_path / "q.npy"), str(tmp_path / "s.npy"), "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err and 'pip install "softdtw[plot]"' in err
    assert not (tmp_path / "p.png").exists()
