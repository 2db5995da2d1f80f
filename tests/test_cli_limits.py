"""Absurd, wrong or hostile input is refused at once, naming the flag, key or file.

One table covers issue 14's cases: counts that used to hang or eat memory (refused
by their bound before any work starts), input that used to be accepted though wrong,
and messages that used to name our internals.  Every row exits 2 with one line that
holds the row's needles and none of the internal names.
"""
from __future__ import annotations

import json
import os

import pytest

from pipeline_core import limits

HUGE = str(2**70)
#: twelve, eight and twenty-three in scripts whose digits int() reads but a kernel cannot spell
ARABIC_12, FULLWIDTH_08, SUPERSCRIPT_23 = "\u0661\u0662", "\uff10\uff18", "\u00b2\u00b3"
ASCII_ONLY = "is not an integer (use the ASCII digits 0-9)"
INTERNAL_NAMES = ("Op.", "ScheduleConfig.", "PipelineConfig.", "Traceback", "internal error",
                  "[Errno")
BIG_DEFAULT_MATMUL = ("-p", "num_k_tiles=64", "-p", "a_loads_per_thread=64", "-p",
                      "b_loads_per_thread=64", "-p", "num_m_mmas=16", "-p", "num_n_mmas=16",
                      "-p", "num_k_mmas=16")

CASES = [
    # --- counts that hung or ate memory -------------------------------------------------
    ("check-iterations", ("check", "pingpong", "--iterations", "1000000000"),
     ["argument --iterations", "expected an integer in [1, 256]"]),
    ("export-iterations", ("export", "pingpong", "--format", "trace", "--iterations", "1000000000"),
     ["argument --iterations", "[1, 128]"]),
    ("analyze-iterations", ("analyze", "pingpong", "--iterations", "1000000000"),
     ["argument --iterations", "[3, 256]"]),
    ("warps-per-group", ("check", "pingpong", "--warps-per-group", "1000"),
     ["argument --warps-per-group", "[1, 32]"]),
    ("num-k-tiles", ("compile", "default-matmul", "-p", f"num_k_tiles={HUGE}"),
     [f"-p num_k_tiles={HUGE} is invalid for schedule default-matmul", "[1, 64]"]),
    ("loads-per-thread", ("compile", "default-matmul", "-p", f"a_loads_per_thread={HUGE}"),
     ["-p a_loads_per_thread=", "[0, 64]"]),
    ("mma-grid", ("compile", "default-matmul", "-p", "num_m_mmas=17"), ["-p num_m_mmas=17", "[1, 16]"]),
    ("picture-width", ("export", "pingpong", "--format", "png", "-o", "{tmp}/x.png", "--width",
                       "1000000000"), ["argument --width", "[200, 8000]"]),
    ("modelled-work", ("check", "default-matmul", *BIG_DEFAULT_MATMUL, "--iterations", "64"),
     ["--iterations 64 would model", f"{limits.MODELLED_ENTRIES:,}", "--iterations 2 or fewer",
      "--warps-per-group 4: every warp runs the kernel"]),
    ("modelled-work-warps", ("check", "pingpong", "--iterations", "256", "--warps-per-group", "16"),
     ["--iterations 256 would model", "--warps-per-group 16"]),
    ("export-modelled-work", ("export", "default-matmul", *BIG_DEFAULT_MATMUL, "--format", "trace",
                              "--iterations", "100"), ["--iterations 100 would model"]),
    ("optimal-seconds", ("analyze", "pingpong", "--optimal", "100000"),
     ["argument --optimal", "[0.001, 600]"]),
    # --- accepted though wrong -------------------------------------------------------------
    ("strategy-single-buffer", ("compile", "default-matmul", "-c", "scheduling=NOPE"),
     ["Unknown scheduling strategy 'NOPE' (-c scheduling)", "Known scheduling strategies: CSP"]),
    ("strategy-forced-identity", ("compile", "4wave", "-c", "scheduling=NOPE"),
     ["Unknown scheduling strategy 'NOPE' (-c scheduling)"]),
    ("knob-unread-by-single-buffer", ("compile", "default-matmul", "-c", "wait_vm_last=300"),
     ["-c wait_vm_last=300 is invalid for ScheduleConfig", "[0, 255]"]),
    ("empty-target", ("compile", "pingpong", "--target", ""),
     ["Unknown target '' (--target)", "Known targets: a100", "mi355x (pipeline-core-amd-mi355x)"]),
    ("foreign-target", ("compile", "hello", "--target", "mi355x-single-buffer"),
     ["--target mi355x-single-buffer is invalid for schedule hello",
      "made for target family copy-ring", "targets that fit: a100, h100, toy-gpu"]),
    ("global-load-never-counts", ("compile", "pingpong", "-T", "vm_per_load_a=0", "-T",
                                  "vm_per_load_b=0"),
     ["-T vm_per_load_a=0 is invalid for target mi355x", "[1, 1024]"]),
    ("ring-without-stages-hello", ("compile", "hello", "-T", "stages=1"),
     ["-T stages=1 is invalid for target toy-gpu", "[2, 8]"]),
    # --- messages that named our internals -------------------------------------------------
    ("huge-tile", ("compile", "pingpong", "-p", f"BM={HUGE}"),
     [f"-p BM={HUGE} is invalid for schedule pingpong", "[1, 65536]"]),
    ("not-an-integer", ("compile", "pingpong", "-p", "BM=2**70"),
     ["-p BM=2**70 is invalid for schedule pingpong", "'2**70' is not an integer"]),
    ("huge-ticks", ("compile", "pingpong", "-T", f"vm_per_load_a={HUGE}"),
     [f"-T vm_per_load_a={HUGE}", "[1, 1024]"]),
    ("huge-lgkm-param", ("compile", "pingpong", "-p", "lgkm_per_load_a=2000"),
     ["-p lgkm_per_load_a=2000", "[0, 1024]"]),
    ("derived-counter", ("compile", "pingpong", "-p", "BM=65536", "-p", "BN=65536", "-p", "BK=512"),
     ["tile shape", "BM=65536", "derived vm_per_load_a (4096)", "[1, 1024]"]),
    ("huge-wait", ("compile", "pingpong", "-c", f"wait_vm_last={HUGE}"),
     [f"-c wait_vm_last={HUGE} is invalid for ScheduleConfig", "[0, 255]"]),
    ("huge-mask", ("compile", "pingpong", "-c", f"sched_barrier_mask={HUGE}"),
     ["-c sched_barrier_mask=", f"[0, {2**64 - 1}]"]),
    ("huge-vgpr", ("compile", "pingpong", "-c", f"max_vgpr={HUGE}"), ["-c max_vgpr=", "[0, 999999]"]),
    ("huge-time-limit", ("compile", "pingpong", "-c", f"search_time_limit_ms={HUGE}"),
     ["-c search_time_limit_ms=", "[0, 3600000]"]),
    ("huge-penalty", ("compile", "pingpong", "-c", f"lds_contention_penalty={HUGE}"),
     ["-c lds_contention_penalty=", "[0, 100000]"]),
    ("output-missing-folder", ("compile", "pingpong", "-o", "{tmp}/missing/s.txt"),
     ["cannot write -o {tmp}/missing/s.txt", "No such file or directory"]),
    ("export-missing-folder", ("export", "pingpong", "--format", "trace", "-o", "{tmp}/no/t.json"),
     ["cannot write -o {tmp}/no/t.json"]),
    ("parameter-plural", ("compile", "pingpong", "-p", "nope=1"),
     ["Unknown -p parameter of schedule pingpong 'nope'", "Known parameters of schedule pingpong:"]),
    ("strategy-plural", ("compile", "pingpong", "-c", "scheduling=zzz"),
     ["Known scheduling strategies:"]),
    # --- issue 23: other scripts' digits, which Python's int() and float() read --------------
    ("arabic-indic-p", ("compile", "pingpong", "-p", f"BM={ARABIC_12}"),
     [f"-p BM={ARABIC_12} is invalid for schedule pingpong", ASCII_ONLY]),
    ("fullwidth-c", ("compile", "pingpong", "-c", f"wait_vm_last={FULLWIDTH_08}"),
     [f"-c wait_vm_last={FULLWIDTH_08} is invalid for ScheduleConfig", ASCII_ONLY]),
    ("superscript-T", ("compile", "pingpong", "-T", f"vm_per_load_a={SUPERSCRIPT_23}"),
     [f"-T vm_per_load_a={SUPERSCRIPT_23} is invalid for target mi355x", ASCII_ONLY]),
    ("arabic-indic-iterations", ("check", "pingpong", "--iterations", ARABIC_12),
     ["argument --iterations: expected an integer in [1, 256]", ASCII_ONLY]),
    ("fullwidth-warps", ("check", "pingpong", "--warps-per-group", FULLWIDTH_08),
     [f"argument --warps-per-group: expected {limits.WARPS_PER_GROUP.allowed()}",
      ASCII_ONLY]),
    ("fullwidth-width", ("export", "pingpong", "--format", "png", "-o", "{tmp}/x.png", "--width",
                         "\uff18\uff10\uff10"), ["argument --width", ASCII_ONLY]),
    ("arabic-indic-optimal", ("analyze", "pingpong", "--optimal", ARABIC_12),
     ["argument --optimal: expected a number in [0.001, 600] seconds", "is not a number (use the "
      "ASCII digits 0-9)"]),
]


@pytest.mark.parametrize("argv, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_naming_the_input(argv, needles, tmp_path, cli):
    result = cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    err = result.stderr
    for needle in needles:
        assert needle.replace("{tmp}", str(tmp_path)) in err, err
    for internal in INTERNAL_NAMES:
        assert internal not in err, err
    assert "pingpongs" not in err and "strategys" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [("compile", "pingpong", "-o", "/dev/full"),
                                  ("export", "pingpong", "--format", "dot", "-o", "/dev/full")])
def test_a_full_disk_names_the_output_file(argv, cli):
    result = cli(*argv)
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: cannot write -o /dev/full: No space left on device"


@pytest.mark.parametrize("argv, needle", [
    (("check", "pingpong", "--iterations", "x"), "argument --iterations: expected an integer in "
                                                 "[1, 256]: 'x' is not an integer"),
    (("check", "pingpong", "--warps-per-group", "99"),
     f"argument --warps-per-group: expected {limits.WARPS_PER_GROUP.allowed()}, got 99"),
    (("export", "pingpong", "--format", "png", "--width", "3"),
     "argument --width: expected an integer in [200, 8000], got 3"),
    (("analyze", "pingpong", "--optimal", "0"), "argument --optimal: expected a number in "
                                                "[0.001, 600], got 0"),
    (("compile", "pingpong", "--format", "yaml"), "argument --format: invalid choice: 'yaml'"),
    (("export", "pingpong", "--format", "pdf"), "argument --format: invalid choice: 'pdf'"),
    (("compile",), "the following arguments are required: schedule"),
])
def test_a_flag_error_is_one_line_without_the_usage_block(cli, argv, needle):
    """Issue 23: argparse printed its 5-7-line usage block above these; now one line names the
    flag, what it allows and where the usage is, as every other refusal (README.md)."""
    result = cli(*argv)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "usage:" not in result.stderr, result.stderr
    command = f"pipeline-core {argv[0]}"
    assert result.stderr.startswith(f"{command}: error: {needle}"), result.stderr
    assert result.stderr.endswith(f"(`{command} --help` lists the options)\n")


def test_the_standalone_checker_errors_in_one_line(capsys):
    from pipeline_core.check.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["--iterations", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("pipeline-core check: error: argument --iterations: expected an integer")


def test_the_largest_accepted_counts_still_run(cli):
    """The bounds are not tighter than the work they protect against."""
    # one warp per group (the reference's document records none): with ping-pong's real 4 the
    # modelled-entries budget binds first, and a compiled document refuses fewer than it records
    golden = os.path.join(os.path.dirname(__file__), "goldens", "pingpong_bf16.json")
    result = cli("check", "--input", golden, "--iterations", str(int(limits.CHECK_ITERATIONS.high)))
    assert result.exit_code == 0, result.stderr
    result = cli("compile", "default-matmul", *BIG_DEFAULT_MATMUL, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["body"] == 2 * 64 + 4


def test_listings_document_every_bound(cli):
    rows = {r["name"]: r for r in json.loads(cli("schedules", "--json").stdout)["schedules"]}
    params = {p["name"]: p for p in rows["default-matmul"]["params"]}
    assert params["num_k_tiles"]["allowed"] == "an integer in [1, 64]"
    assert params["a_loads_per_thread"]["allowed"] == "an integer in [0, 64]"
    targets = {r["name"]: r for r in json.loads(cli("targets", "--json").stdout)["targets"]}
    vm = next(p for p in targets["mi355x"]["params"] if p["name"] == "vm_per_load_a")
    assert vm["allowed"] == limits.GLOBAL_LOAD_TICKS.allowed()
    text = cli("check", "--help").stdout
    assert "[1, 256]" in text and "[1, 32]" in text


def test_internal_errors_have_their_own_exit_status_and_say_how_to_report(cli, monkeypatch):
    from pipeline_core.export import text

    def broken(compiled, **_):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(text, "render", broken)
    result = cli("compile", "pingpong")
    assert result.exit_code == 70
    assert result.stderr.startswith("internal error: RuntimeError: a bug of ours\n")
    assert "This is a bug in pipeline-core, not in your input. Please report it" in result.stderr
    assert "-v" in result.stderr
    verbose = cli("compile", "pingpong", "-v")
    assert verbose.exit_code == 70 and "Traceback" in verbose.stderr


def test_ctrl_c_stops_the_tool_with_its_own_status(cli, monkeypatch):
    from pipeline_core.export import text

    def interrupted(compiled, **_):
        raise KeyboardInterrupt

    monkeypatch.setattr(text, "render", interrupted)
    result = cli("compile", "pingpong")
    assert (result.exit_code, result.stderr) == (130, "interrupted\n")
