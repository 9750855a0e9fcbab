"""The recurrent network's benchmark: rows for every schedule by its name in ``tools.schedules``, with its
speed-up over BPTT, PyTorch's nn.RNN beside them, a budget that skips what would take too long, and the
profiling script's JSON."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from leapfrog_gpu import SGD, Adam, AdamW
from leapfrog_gpu.tools.bench import command as bench, rnn as bench_rnn
from leapfrog_gpu.tools.schedules import make_solver, schedule_names
from leapfrog_gpu.core.torch_io import INSTALL

from helpers import rnn_lists

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_measure_gives_a_row_per_schedule_with_its_speedup_over_bptt():
    rows = bench_rnn.measure(4, 8, 2, L=4, repeats=2, max_gflop=1e-4)
    by_name = {row["schedule"]: row for row in rows}
    names = list(schedule_names("rnn"))
    assert list(by_name) == names + [f"step {name}" for name in names] and names[0] == "bptt"
    for part in ("", "step "):
        bptt = by_name[f"{part}bptt"]
        assert bptt["speedup"] == 1.0
        for name in names[1:-1]:  # > 1: faster than BPTT
            assert by_name[part + name]["speedup"] == bptt["median_s"] / by_name[part + name]["median_s"]
        assert by_name[f"{part}naumov-rnn"]["refused"].startswith("skipped: ")  # 4e-4 GFLOP over a budget of 1e-4
    assert by_name["bptt"]["rounds"] == 16 and by_name["step bptt"]["rounds"] == 2 * 16  # the forward's K·tau too
    # TimeScan on the host scans by cyclic reduction: K·(1 + 2·ceil(log2 8) - 1) = 2·6 rounds
    assert by_name["wavefront"]["rounds"] == 9 and by_name["timescan"]["rounds"] == 12
    assert by_name["step wavefront"]["rounds"] == 16 + 9 and by_name["step timescan"]["rounds"] == 16 + 12
    # the forward's flops: per layer 2·4·4·8·2 (w a), 2·4²·7·2 (u a, t >= 2), 5·4·8·2 (bias, sigma, sigma')
    forward = 2 * (2 * 4 * 4 * 8 * 2 + 2 * 16 * 7 * 2 + 5 * 4 * 8 * 2)
    step = by_name["step bptt"]
    assert step["flops"] == step["sequential_flops"] == forward + by_name["bptt"]["flops"]
    assert by_name["step timescan"]["flops"] == forward + by_name["timescan"]["flops"]
    for row in rows:
        assert bench_rnn.format_row(row).startswith(f"   4     8   2 {row['schedule']} ")
    assert [row["schedule"] for row in bench_rnn.measure(4, 8, 2, repeats=1, parts=("step",))] == list(by_name)[5:]


def test_a_step_parallel_in_time_over_the_budget_is_skipped_by_the_flops_of_one_iteration():
    newton, quasi = make_solver("rnn", "newton"), make_solver("rnn", "quasi-newton")
    budget = (quasi.iteration_flops([6] * 4, 16, 2) + newton.iteration_flops([6] * 4, 16, 2)) / 2e9
    rows = bench_rnn.measure(6, 16, 2, repeats=1, names=["bptt"], solvers=["newton", "quasi-newton"],
                             max_gflop=budget, parts=("step",))
    by_name = {row["schedule"]: row for row in rows}
    assert by_name["step timescan+newton"]["refused"].startswith("skipped: an iteration takes ")
    assert by_name["step timescan+quasi-newton"]["median_s"] > 0


def test_bptts_chain_is_timed_whatever_the_budget():
    """BPTT, the baseline, and Leapfrog, its chain with workers, run whatever the budget; a scan is skipped."""
    rows = bench_rnn.measure(3, 4, 1, repeats=1, max_gflop=1e-12, names=["bptt", "leapfrog", "timescan"])
    by_name = {row["schedule"]: row for row in rows}
    assert by_name["bptt"]["speedup"] == by_name["step bptt"]["speedup"] == 1.0
    assert by_name["leapfrog"]["median_s"] > 0 and by_name["step leapfrog"]["median_s"] > 0
    assert by_name["timescan"]["refused"].startswith("skipped: ") and by_name["step timescan"]["refused"]


def test_pytorch_nn_rnn_is_timed_on_the_same_network():
    torch = pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    rows = bench_rnn.measure(4, 6, 1, repeats=1, torch=torch, names=["bptt"])
    assert [row["schedule"] for row in rows] == ["bptt", "torch nn.RNN", "step bptt", "step torch nn.RNN"]
    assert all(row["median_s"] > 0 for row in rows)


def test_pytorchs_network_is_ours_its_gradients_and_its_step():
    """The anchor's gradients are the network's (backprop, float64, of the batch-mean cost) and its SGD step is
    ``sgd_step``'s."""
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import RNN

    x, y = bench_rnn.sequences(3, 5, 2, "float64")
    with RNN([3] * 4, output="every", dtype="float64", backend="numpy") as net:
        anchor = bench_rnn.torch_step(net, x, y, SGD(0.1))
        anchor.backward(anchor.loss())
        nabla_b, nabla_w, nabla_u = rnn_lists(net.backprop(x, y))
        module = anchor.module
        for i in range(2):  # one module of two layers, as its users write it
            assert np.allclose(module.get_parameter(f"recurrent.weight_ih_l{i}").grad.numpy(), nabla_w[i] / 2,
                               rtol=1e-12)
            assert np.allclose(module.get_parameter(f"recurrent.weight_hh_l{i}").grad.numpy(), nabla_u[i] / 2,
                               rtol=1e-12)
        assert np.allclose(module.get_parameter("output.0.bias").grad.numpy(), nabla_b[-1] / 2, rtol=1e-12)
        anchor.step()
        net.sgd_step(x, y, 0.1)
        assert np.allclose(module.get_parameter("recurrent.weight_hh_l1").detach().numpy(), net.recurrent[1],
                           rtol=1e-12)
        assert np.allclose(module.get_parameter("output.0.weight").detach().numpy(), net.weights[-1], rtol=1e-12)
        assert not module.get_parameter("recurrent.bias_hh_l0").detach().numpy().any()  # held at zero: one bias a layer


def test_the_profiling_scripts_deer_problem_refuses_the_options_it_sets(tmp_path):
    """--deer sets N, tau, B, the cell, the schedules and the parts itself: one given beside it is refused (it was
    dropped without a word)."""
    done = subprocess.run([sys.executable, str(ROOT / "profiling" / "rnn_bench.py"), "--deer", "--N", "4", "--cell",
                           "lstm", "--out", str(tmp_path / "deer.json")], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, "rnn_bench.py: error: --deer sets --N, --cell itself: drop them\n")
    assert not list(tmp_path.iterdir())


def test_the_profiling_script_writes_its_json(tmp_path):
    out = tmp_path / "rnn.json"
    done = subprocess.run([sys.executable, str(ROOT / "profiling" / "rnn_bench.py"), "--N", "3", "--tau", "4,5",
                           "--B", "1", "--repeats", "1", "--repeats-long", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert {row["tau"] for row in report["rows"]} == {4, 5} and report["meta"]["threads"] == 1
    assert {row["cell"] for row in report["rows"]} == {"elman"}  # every row names its cell, the default too
    names = ["step bptt", "step leapfrog", "step timescan", "step timescan+newton", "step timescan+quasi-newton"]
    assert [row["schedule"] for row in report["rows"] if row["tau"] == 4][:5] == names
    assert all(name in done.stdout for name in names)


def test_the_command_prints_its_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "4", "--batch", "1,2",
                             "--repeats", "1", "--no-torch", "--blas-threads", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert status == 0 and printed.startswith("\n".join(bench_rnn.HEAD) + "\n")
    assert printed.count("\n") == 3 + 2 * 10 + 1  # the head, 10 rows a network, the line saying PyTorch was skipped
    report = json.loads(out.read_text())
    assert len(report["rows"]) == 20
    assert (report["layers"], report["k"], report["blas_threads"]) == (4, 2, 2)  # the header, as the options said


@pytest.mark.parametrize("argv, message", [
    (["--layers", "2"], "--layers"),
    (["--time", "forward"], "unknown part 'forward'; choose from backward, step"),
    (["--time", "backward,backward"], "argument --time: part 'backward' is named twice; name each once"),
    (["--optimizer", "adam,sgd,adam"], "argument --optimizer: optimizer 'adam' is named twice; name each once"),
    (["--forward-solver", "newton,newton"], "RNN forward solver 'newton' is named twice; name each once"),
    (["--schedule", "bptt,leapfrog,bptt"], "argument --schedule: RNN schedule 'bptt' is named twice; name each once"),
    (["--max-gflop", "nan"], "argument --max-gflop: must be a finite number > 0; got 'nan'"),
    (["--max-gflop", "-1"], "argument --max-gflop: must be a finite number > 0; got '-1'"),
    (["--max-gflop", "0"], "argument --max-gflop: must be a finite number > 0; got '0'"),
    (["--time", "backward", "--optimizer", "adam"], "--optimizer applies to the steps, and --time backward times the "
                                                    "backward pass alone: add step to --time"),  # it timed nothing
    (["--time", "backward", "--forward-solver", "newton"], "--forward-solver applies to the steps"),
    (["--plot", "r.png"], "unrecognized arguments: --plot r.png"),
    (["--torch-threads", "1,1"], "argument --torch-threads: give each thread count once; got '1,1', with 1 twice"),
    (["--tau", "4,2,4"], "argument --tau: give each sequence length once; got '4,2,4', with 4 twice"),
    (["--torch-threads", "2"], "--torch-threads applies to PyTorch's steps, which --no-torch skips: leave one of "
                               "them out"),  # it timed nothing, as the MLP's --blas-threads on cupy would
    (["--time", "backward", "--torch-threads", "2"], "--torch-threads applies to the steps, and --time backward"),
])
def test_the_command_refuses_a_bad_option_in_one_line(capsys, argv, message):
    """After the options of a run of a second, which a bad option taken would be."""
    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "4", "--batch", "1", "--repeats",
                    "1", "--no-torch", "--quiet", *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and message in err


def test_the_help_names_the_files_the_command_writes(capsys):
    """Exit status 5 names --plot where the suite writes one (the MLP's), not where --plot is refused."""
    for model, plot in (("rnn", False), ("mlp", True)):
        with pytest.raises(SystemExit):
            bench.main(["--model", model, "--help"])
        assert ("--plot" in capsys.readouterr().out.split("exit status:")[1]) == plot


def test_the_help_describes_the_benchmark_in_plain_text(capsys):
    """The module docstring's first paragraph, without its ``markup``."""
    with pytest.raises(SystemExit):
        bench.main(["--model", "rnn", "--help"])
    out = capsys.readouterr().out
    assert "leapfrog-bench --model rnn: the recurrent network's backward pass and training step under each" in out
    assert "``" not in out and "PyTorch's nn.RNN." in " ".join(out.split())


def test_leapfrog_bench_takes_no_prefix_of_an_option_for_the_option(capsys):
    """``--mod rnn`` is not ``--model rnn`` (which would run the RNN's benchmark), nor ``--layer`` ``--layers``."""
    for argv in (["--mod", "rnn"], ["--model", "rnn", "--layer", "3"]):
        with pytest.raises(SystemExit) as stop:
            bench.main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1 and "unrecognized arguments: " + argv[-2] in err


def modelled_tables(tmp_path, rows):
    """The lines profiling/rnn_tables.py prints for ``rows`` at a round of 1 s and a flop a second: a step's modelled
    ms are its rounds plus its flops, times 1000."""
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    done = subprocess.run([sys.executable, str(ROOT / "profiling" / "rnn_tables.py"), str(path), "--round-us", "1e6",
                           "--tflops", "1e-12"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_leapfrog_bench_model_rnn_runs_the_rnn_benchmark(capsys):
    assert bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "3", "--batch", "1",
                       "--repeats", "1", "--no-torch"]) == 0
    assert capsys.readouterr().out.startswith("\n".join(bench_rnn.HEAD))


def test_the_tables_give_the_measured_steps_and_a_gpu_model_of_rounds_and_flops(tmp_path):
    """profiling/rnn_tables.py; its model at 1 s a round and 1 flop/s: N = 2, L = 4, tau = 3, B = 1, whose weight
    gradients take 2·(2·2·2·3 + 2·2²·2 + 2·3) + 2·2·2·3 + 2·3 = 122 flops."""
    row = {"N": 2, "L": 4, "tau": 3, "B": 1}
    rows = [{**row, "schedule": "step bptt", "rounds": 12, "flops": 100, "median_s": 0.002},
            {**row, "schedule": "step timescan", "refused": "skipped: 9 GFLOP over the budget of 3"},
            {**row, "schedule": "step timescan+newton", "rounds": 4, "flops": 500, "median_s": 0.004},
            {**row, "schedule": "step timescan+quasi-newton", "rounds": 2, "flops": 110, "median_s": 0.001},
            {**row, "schedule": "step torch nn.RNN", "median_s": 0.008}]
    lines = modelled_tables(tmp_path, rows)
    bptt, newton, quasi = 12 + 100 + 122, 4 + 500 + 122, 2 + 110 + 122
    assert lines[-1] == f"| 2 | 3 | 1 | {bptt * 1e3:.2f} ms | — | {bptt / newton:.2f}× | {bptt / quasi:.2f}× |"
    # measured: BPTT's 2 ms, leapfrog and timescan absent or refused, 0.5×, 2×, torch 0.25×
    assert "| 2 | 3 | 1 | 2.00 | — | — | 0.50× | 2.00× | 0.25× |" in lines


def test_the_model_of_a_gru_counts_its_gates_and_its_inputs_and_the_table_its_torch_rows(tmp_path):
    """profiling/rnn_tables.py on a GRU's rows (``rnn_bench.py --deer``'s): N = 2 on n_1 = 3 inputs, L = 4, tau = 3,
    B = 1, whose weight gradients take 3 gates' products and b_hn's sums, 3·(2·2·3·3 + 2·2·2·2 + 2·3) + 2·3 + 3·(2·2·2·3
    + 2·2·2·2 + 2·3) + 2·3 + 2·2·2·3 + 2·3 = 354 flops (an Elman cell's on [2] * 4: 122); PyTorch's rows as the run
    named them."""
    row = {"N": 2, "L": 4, "tau": 3, "B": 1, "cell": "gru", "inputs": 3}
    rows = [{**row, "schedule": "step bptt", "rounds": 12, "flops": 100, "median_s": 0.002},
            {**row, "schedule": "step timescan+newton", "rounds": 4, "flops": 500, "median_s": 0.004},
            {**row, "schedule": "step torch nn.GRU 1t", "median_s": 0.008},
            {**row, "schedule": "step torch nn.GRU 2t", "median_s": 0.001}]
    lines = modelled_tables(tmp_path, rows)
    bptt, newton = 12 + 100 + 354, 4 + 500 + 354
    assert lines[-1] == f"| 2 | 3 | 1 | {bptt * 1e3:.2f} ms | — | {bptt / newton:.2f}× | — |"
    assert "| N | τ | B | BPTT ms | leapfrog | timescan | timescan+newton | timescan+quasi-newton | " \
           "torch nn.GRU 1t | torch nn.GRU 2t |" in lines
    assert "| 2 | 3 | 1 | 2.00 | — | — | 0.50× | — | 0.25× | 2.00× |" in lines


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_gated_cell_is_timed_beside_its_torch_module_at_each_number_of_threads(cell):
    torch = pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    rows = bench_rnn.measure(3, 6, 2, repeats=1, torch=torch, cell=cell, torch_threads=[1, 2], parts=("step",),
                             max_gflop=1.0)
    by_name = {row["schedule"]: row for row in rows}
    torch_rows = [f"step torch nn.{cell.upper()} {t}t" for t in (1, 2)]
    assert list(by_name) == [f"step {name}" for name in schedule_names("rnn")] + torch_rows
    assert by_name["step naumov-rnn"]["refused"] == ("refused: NaumovRNN's operators are the Elman cell's, not "
                                                     f"{dict(gru='a GRU', lstm='an LSTM')[cell]}'s")
    assert all(by_name[name]["median_s"] > 0 and by_name[name]["cell"] == cell for name in torch_rows)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_pytorchs_gated_module_steps_as_our_network(cell):
    """Two inputs (DEER's problem): the anchor's SGD step is ``sgd_step``'s, a GRU's b_hn in ``bias_hh``'s n rows."""
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import RNN

    x, y = bench_rnn.sequences(3, 5, 2, "float64", inputs=2)
    with RNN([2, 3, 3, 3], output="every", dtype="float64", backend="numpy", cell=cell) as net:
        anchor = bench_rnn.torch_step(net, x, y, SGD(0.1))
        anchor.step()
        net.sgd_step(x, y, 0.1)
        for i in range(2):
            assert np.allclose(anchor.module.get_parameter(f"recurrent.weight_hh_l{i}").detach().numpy(),
                               net.recurrent[i], rtol=1e-12, atol=1e-14)
        assert np.allclose(anchor.module.get_parameter("output.0.weight").detach().numpy(), net.weights[-1],
                           rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("update", ["foreach", "fused"])
@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("rule", [SGD(0.05, momentum=0.9), Adam(0.01), AdamW(0.01)], ids=repr)
def test_pytorchs_step_by_an_optimizer_is_train_steps(cell, rule, update):
    """Three steps of torch.optim's optimizer of ``rule`` (``update=True``) on the anchor's module, and
    ``train_step`` by ``rule``: the same parameters after (float64; relative 1e-10), a GRU's b_hn among them."""
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import RNN

    x, y = bench_rnn.sequences(3, 5, 2, "float64")
    with RNN([3] * 4, output="every", dtype="float64", backend="numpy", cell=cell) as net:
        anchor = bench_rnn.torch_step(net, x, y, rule, update)
        assert anchor.refused is None and anchor.update.__self__.defaults[update] is True
        start = net.recurrent[1].copy()
        for _ in range(3):
            anchor.step()
            net.train_step(x, y, rule)
        assert np.abs(net.recurrent[1] - start).max() > 1e-3
        pairs = [("recurrent.weight_hh_l1", net.recurrent[1]), ("recurrent.weight_ih_l0", net.weights[0]),
                 ("output.0.weight", net.weights[-1]), ("output.0.bias", net.biases[-1])]
        if cell == "gru":  # bias_ih's r and z rows hold b alone: bias_hh's stay zero
            pairs += [("recurrent.bias_ih_l1", net.biases[1]), ("recurrent.bias_hh_l1", np.concatenate(
                [np.zeros(6), net.parameters()[3]["b_hn"]]))]
        for name, ours in pairs:
            np.testing.assert_allclose(anchor.module.get_parameter(name).detach().numpy(), ours, rtol=1e-10,
                                       atol=1e-14)


def test_the_command_times_the_steps_by_each_optimizer_and_the_backward_passes_once(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "3", "--batch", "2",
                       "--schedule", "bptt,leapfrog", "--optimizer", "sgd,adam", "--repeats", "1", "--quiet",
                       "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows, torch = report["rows"], [] if report["torch_note"] else ["torch nn.RNN"]
    steps = ["step bptt", "step leapfrog", *(f"step {name}{how}" for name in torch for how in ("", " fused"))]
    assert [(r["schedule"], r.get("optimizer")) for r in rows] == [
        *((name, None) for name in ["bptt", "leapfrog", *torch]), *((s, "sgd") for s in steps),
        *((s, "adam") for s in steps)]
    assert all(r["median_s"] > 0 and r["speedup"] > 0 for r in rows)
    assert [r["speedup"] for r in rows if r["schedule"] == "step bptt"] == [1.0, 1.0]  # each optimizer's own baseline
    lines = capsys.readouterr().out.splitlines()
    heading = lines.index(f"steps by adam: {Adam(1e-9)!r}")  # once, above adam's rows; none above sgd's
    assert lines[heading - 1].split()[3:5] == steps[-1].split()[:2]  # sgd's last step row
    assert lines[heading + 1].split()[3:5] == steps[0].split()  # adam's step bptt
    assert sum(line.startswith("steps by ") for line in lines) == 1
