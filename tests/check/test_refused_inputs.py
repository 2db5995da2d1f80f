"""Inputs the checker refuses (issue 16): each would otherwise change a verdict silently."""
from __future__ import annotations

import json

import pytest

from pipeline_core.testing import run_cli


@pytest.fixture(scope="module")
def pingpong_doc():
    return json.loads(run_cli(["compile", "pingpong", "--format", "json"]).stdout)


def _first(doc, tag):
    return next(e for e in doc["kernel"] if e["op"]["tag"] == tag)


def _set_wait(tag, value):
    def change(d):
        _first(d, tag)["op"]["wait_value"] = value
    return change


CASES = [
    ("stagger-out-of-range", lambda d: d.__setitem__("warp_stagger_index", 99),
     "warp_stagger_index: must be 0..10 (the prologue has 10 entries) with "
     "config.warp_stagger.enabled true, got 99"),
    # issue 23: one past the prologue staggers nothing, so one warp group would be checked
    # (a deleted barrier came out SAFE); the range the text gives is the one staggered
    ("stagger-past-prologue", lambda d: d.__setitem__("warp_stagger_index", 11),
     "must be 0..10 (the prologue has 10 entries) with config.warp_stagger.enabled true, got "
     "11; set enabled to false for a schedule without a stagger"),
    ("stagger-negative", lambda d: d.__setitem__("warp_stagger_index", -1), "got -1"),
    ("stagger-disabled-inside", lambda d: d["config"]["warp_stagger"].__setitem__("enabled", False),
     "warp_stagger_index: must be 11 or more (past the prologue's 10 entries) with "
     "config.warp_stagger.enabled false, got 4"),
    ("groups-contradict-stagger", lambda d: d["execution"].__setitem__("groups", 1),
     "execution.groups: must be 2: warp_stagger_index 4 staggers 2 warp groups"),
    # issue 23: versions start at 1
    ("format-version-0", lambda d: d.__setitem__("format_version", 0),
     "format_version: {path} has format_version 0, but versions start at 1: write 1, or leave "
     "the key out"),
    ("format-version-negative", lambda d: d.__setitem__("format_version", -1),
     "has format_version -1, but versions start at 1"),
    # issue 23: a lowering the document's other keys contradict
    ("lowering-unknown", lambda d: d.__setitem__("lowering", "bloks"),
     "lowering: 'bloks' is no registered lowering (\"agents\", \"blocks\", \"ring\"; no "
     "lowering key: the block program)"),
    ("lowering-not-a-name", lambda d: d.__setitem__("lowering", 7),
     "lowering: expected the name of the lowering that built the schedule (or no lowering key: "
     "the block program), got 7"),
    ("lowering-ring-on-blocks", lambda d: d.__setitem__("lowering", "ring"),
     'lowering: "ring" contradicts blocks, which only a block-program document has'),
    ("stagger-enabled-string", lambda d: d["config"]["warp_stagger"].__setitem__("enabled", "false"),
     "config.warp_stagger.enabled: expected true or false, got 'false'"),
    ("negative-wait", _set_wait(129, -1), "kernel[29].op.wait_value: a wait on vm takes 0..63"),
    ("over-limit-vm", _set_wait(129, 64), "a wait on vm takes 0..63 (its encoding), got 64"),
    ("over-limit-lgkm", _set_wait(130, 16), "a wait on lgkm takes 0..15 (its encoding), got 16"),
    ("mistyped-ticks", lambda d: d["config"].__setitem__("vm_per_load_a", "2"),
     "config.vm_per_load_a: expected an integer >= 0, got '2'"),
    ("mistyped-match", lambda d: d["config"].__setitem__("ch0_match_field", True),
     "config.ch0_match_field: expected 0 (stage) or 1 (subtile), got True"),
    ("mistyped-warps", lambda d: d["execution"].__setitem__("warps_per_group", 0),
     "execution.warps_per_group: expected an integer in [1, 32], got 0"),
]


@pytest.mark.parametrize("name,change,needle", CASES, ids=[c[0] for c in CASES])
def test_a_bad_document_exits_2_naming_the_path(pingpong_doc, tmp_path, name, change, needle):
    doc = json.loads(json.dumps(pingpong_doc))
    change(doc)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2, result.stdout + result.stderr
    assert needle.format(path=path) in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_deep_json_is_refused_before_parsing(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2
    assert f"{path} nests 100000 levels deep, more than the 64" in result.stderr


def test_bytes_that_are_not_utf8_name_the_file(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"schedule": "caf\xe9"}')
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2
    assert f"{path} is not UTF-8 text (byte 17 is 0xe9)" in result.stderr


def test_the_document_records_its_warps_and_check_input_uses_them(pingpong_doc, tmp_path):
    """4-wave's reference epilogue races only with its real 4 warps; the document says 4."""
    run = run_cli(["compile", "4wave", "--format", "json", "--allow-unsafe"])
    doc = json.loads(run.stdout)
    assert doc["execution"] == {"groups": 1, "warps_per_group": 4}
    path = tmp_path / "4wave.json"
    path.write_text(json.dumps(doc))
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 1 and "LDS_RAW at epilogue[1] (group 0 warp 0)" in result.stdout


@pytest.mark.parametrize("override,needle", [
    ("wait_vm_last=64", "kernel[29] WAIT_VM(64) cannot be encoded: vmcnt waits on target 'mi355x' take 0..63"),
    ("wait_lgkm_first=16", "WAIT_LGKM(16) cannot be encoded: lgkmcnt waits on target 'mi355x' take 0..15"),
])
def test_compile_refuses_a_manual_wait_beyond_the_encoding(override, needle):
    result = run_cli(["compile", "pingpong", "-c", "auto_waits=false", "-c", override,
                      "--allow-unsafe"])
    assert result.exit_code == 2
    assert needle in result.stderr
    assert f"(set by your -c {override}: lower it until every such wait is in 0.." in result.stderr


@pytest.mark.parametrize("argv, needle", [
    # issue 23: 1,063 fuzz refusals said "kernel[3] WAIT_LGKM(16) cannot be encoded" naming no key
    (["pingpong", "-p", "lgkm_per_load_a=16", "-p", "lgkm_per_load_b=16", "-p", "fp8=true"],
     "kernel[3] WAIT_LGKM(16) cannot be encoded: lgkmcnt waits on target 'mi355x' take 0..15 (set "
     "by your -p lgkm_per_load_a=16, -p lgkm_per_load_b=16: lower them until every such wait is "
     "in 0..15)"),
    (["matmul-grid", "-p", "lgkm_per_load_a=16", "-c", "auto_drain=true"],
     "WAIT_LGKM(16) cannot be encoded: lgkmcnt waits on target 'mi355x' take 0..15 (set by your "
     "-p lgkm_per_load_a=16: lower it until every such wait is in 0..15)"),
    (["pingpong", "-T", "vm_per_load_a=32", "-T", "vm_per_load_b=32"],
     "WAIT_VM(96) cannot be encoded: vmcnt waits on target 'mi355x' take 0..63 (set by your "
     "-T vm_per_load_a=32, -T vm_per_load_b=32: lower them until every such wait is in 0..63)"),
])
def test_an_unencodable_derived_wait_names_the_keys_that_set_its_ticks(argv, needle):
    """The keys named are those the sync model takes the channel's ticks from (Effect.ticks_from),
    not every key given: fp8 and auto_drain are not named."""
    result = run_cli(["compile", *argv])
    assert result.exit_code == 2
    assert result.stderr == f"error: schedule {argv[0]}: " + result.stderr.split(": ", 2)[2]
    assert needle in result.stderr, result.stderr
    assert "fp8" not in result.stderr and "auto_drain" not in result.stderr


def test_a_manual_wait_names_its_own_knob_not_another_with_the_same_value():
    """wait_vm_last=16 sets the vm wait: a WAIT_LGKM(16) is wait_lgkm_first's (the knob the
    target's fragment wait binds), whatever the values."""
    result = run_cli(["compile", "pingpong", "-c", "auto_waits=false", "-c", "wait_vm_last=16",
                      "-c", "wait_lgkm_first=16", "--allow-unsafe"])
    assert result.exit_code == 2
    assert result.stderr.endswith("WAIT_LGKM(16) cannot be encoded: lgkmcnt waits on target "
                                  "'mi355x' take 0..15 (set by your -c wait_lgkm_first=16: lower "
                                  "it until every such wait is in 0..15)\n"), result.stderr


def test_an_unencodable_wait_names_every_key_when_none_sets_its_ticks():
    """With no key linked to the channel, the refusal still names what the user gave."""
    from pipeline_core.proof import UnencodableWaitError

    exc = UnencodableWaitError("schedule s: kernel[3] WAIT_LGKM(16) cannot be encoded", value=16,
                               allowed="in 0..15", sources=("config.lgkm_per_load_a",))
    named = exc.naming_keys({"-p": {"m": "7"}, "-T": {}, "-c": {"wait_vm_last": "16"}})
    assert str(named) == ("schedule s: kernel[3] WAIT_LGKM(16) cannot be encoded (the schedule "
                          "was built with your -p m=7, -c wait_vm_last=16; none of them sets "
                          "this wait's ticks, which come from config.lgkm_per_load_a)")
    assert exc.naming_keys({"-p": {}, "-T": {}, "-c": {}}) is exc


def test_fix_suggestions_stay_within_the_encoding():
    """No fix proposes a negative wait or one above the channel's limit."""
    from pipeline_core.api import compile_named

    limits = {"vm": 63, "lgkm": 15}
    for knob in ("minimal_barriers", "barrier_before_pre_ops", "partial_prologue_drain"):
        c = compile_named("pingpong", config_overrides={knob: "true"}, allow_unsafe=True)
        for h in c.hazards:
            fix = h["fix"]
            if fix and fix["value"] is not None:
                assert 0 <= fix["value"] <= limits[fix["counter"]], fix


# --- issue 23: documents that slipped past check --input ---------------------------------

def _check(tmp_path, doc, *extra):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    return run_cli(["check", "--input", str(path), *extra])


@pytest.fixture(scope="module")
def agents_doc():
    run = run_cli(["compile", "warpspecialized-gemm", "--target", "h100", "--format", "json"])
    assert run.exit_code == 0, run.stderr
    return json.loads(run.stdout)


def _without(key):
    return lambda d: d.pop(key)


AGENTS_CASES = [
    # its phase lists are empty: read as a block program they were proven SAFE
    ("lowering-removed", _without("lowering"),
     "schedule document: agents: only an agents document has an agents section, but it has no "
     "lowering key: an agents document is proven by compile, not re-checked from its JSON: run "
     "`pipeline-core check warpspecialized-gemm` with the same --target, -p and -T"),
    ("lowering-misspelt", lambda d: d.__setitem__("lowering", "Agents"),
     "schedule document: lowering: 'Agents' is no registered lowering"),
    ("lowering-ring", lambda d: d.__setitem__("lowering", "ring"),
     "agents: only an agents document has an agents section, but its lowering is 'ring'"),
    ("agents-section-removed", _without("agents"),
     "lowering: an agents document is proven by compile, not re-checked from its JSON (and this "
     "one lacks its agents section): run `pipeline-core check warpspecialized-gemm`"),
]


@pytest.mark.parametrize("name,change,needle", AGENTS_CASES, ids=[c[0] for c in AGENTS_CASES])
def test_an_agents_document_with_a_contradicted_lowering_is_refused(agents_doc, tmp_path, name,
                                                                    change, needle):
    doc = json.loads(json.dumps(agents_doc))
    assert doc["lowering"] == "agents" and doc["kernel"] == []  # what made the mutations SAFE
    change(doc)
    result = _check(tmp_path, doc)
    assert result.exit_code == 2, result.stdout
    assert needle in result.stderr and result.stderr.count("\n") == 1


def test_a_generic_document_without_its_lowering_names_the_key(tmp_path):
    doc = json.loads(run_cli(["compile", "multistage-gemm", "--format", "json"]).stdout)
    assert doc["lowering"] == "ring"
    del doc["lowering"]
    result = _check(tmp_path, doc)
    assert result.exit_code == 2
    assert ('prologue[0].op.k_offset: a double-buffer global load needs a K offset (a ring '
            'lowering\'s document, whose loads have none, says "lowering": "ring")') in result.stderr


def test_generic_lowering_on_a_single_buffer_document_is_refused(tmp_path):
    doc = json.loads(run_cli(["compile", "default-matmul", "--format", "json"]).stdout)
    doc["lowering"] = "ring"  # was SAFE, read with the ring lowering's tile counting
    result = _check(tmp_path, doc)
    assert result.exit_code == 2
    assert '"ring" contradicts config.vm_per_load_a, which only a block-program' in result.stderr


@pytest.mark.parametrize("schedule", ["default-matmul", "multistage-gemm", "hello"])
def test_a_kernel_without_its_mmas_is_a_missing_product(tmp_path, schedule):
    """An empty kernel loads nothing, so the loaded K tiles all met their MMAs: it was SAFE."""
    doc = json.loads(run_cli(["compile", schedule, "--format", "json"]).stdout)
    assert _check(tmp_path, doc).exit_code == 0
    doc["kernel"] = []
    result = _check(tmp_path, doc)
    assert result.exit_code == 1, result.stdout + result.stderr
    assert f"{schedule}: UNSAFE: MISSING_PRODUCT at kernel[0] iteration 0" in result.stdout
    assert "no kernel MMA accumulates product (0, 0), so the loop never computes it" in result.stdout


def test_a_kernel_missing_one_products_mmas_names_that_product():
    from pipeline_core.check import HazardKind, check_document

    from .helpers import load

    doc = load("fourwave_fp8")
    doc["kernel"] = [e for e in doc["kernel"]
                     if not (e["op"]["role"] == 3 and (e["op"]["stage"], e["op"]["subtile"]) == (1, 0))]
    found = [v for v in check_document(doc).violations
             if v.kind is HazardKind.MISSING_PRODUCT and v.site.index == len(doc["kernel"])]
    assert [v.message for v in found] == [
        "no kernel MMA accumulates product (1, 0), so the loop never computes it"]
    assert found[0].fix.action == "review" and found[0].fix.phase == "kernel"


def test_compile_refuses_a_kernel_transform_that_drops_every_mma():
    from pipeline_core import hookimpl
    from pipeline_core.api import compile_named
    from pipeline_core.plugins import PluginHost
    from pipeline_core.proof import UnsafeScheduleError
    from pipeline_core.schedule import KernelTransform

    class DropsTheKernel:
        @hookimpl
        def pipeline_core_kernel_transforms(self, schedule, target, config):
            return [KernelTransform("drop-all", lambda kernel, body, cfg: ())]

    host = PluginHost(extra_plugins=[("drops_kernel", DropsTheKernel())])
    with pytest.raises(UnsafeScheduleError) as exc:
        compile_named("default-matmul", host=host)
    assert "MISSING_PRODUCT at kernel[0]" in str(exc.value)
    assert "no kernel MMA accumulates product (0, 0)" in str(exc.value)


def test_an_oversized_prologue_is_refused_before_modelling(tmp_path):
    """The budget counted kernel x iterations only: an 18,000-entry prologue ran for 22 s."""
    doc = json.loads(run_cli(["compile", "multistage-gemm", "--format", "json"]).stdout)
    doc["prologue"] = [dict(e, index=i) for i, e in enumerate((doc["prologue"] * 600)[:3200])]
    doc["warp_stagger_index"] = len(doc["prologue"]) + 1
    fits = _check(tmp_path, doc, "--warps-per-group", "15", "--iterations", "1")
    assert fits.exit_code in (0, 1), fits.stderr  # 48,000 + 28 x 15 + 51 x 15 entries: fits
    result = _check(tmp_path, doc, "--warps-per-group", "16")
    assert result.exit_code == 2
    assert ("the prologue and epilogue have 51,648 entries and the kernel 816, so even "
            "--iterations 1 would model more than the 50,000 entries a run may model") in result.stderr


def test_the_budget_counts_prologue_and_epilogue():
    from pipeline_core import limits

    bound = limits.CHECK_ITERATIONS
    assert limits.default_iterations(1000, bound) == limits.DEFAULT_ITERATIONS
    assert limits.default_iterations(1000, bound, fixed_entries=45_000) == 5
    assert limits.iterations_over_budget(12, 1000, bound, fixed_entries=38_000) == ""
    assert limits.iterations_over_budget(12, 1000, bound, fixed_entries=38_001) == (
        "--iterations 12 would model 50,001 entries (1,000 per iteration and the prologue and "
        "epilogue 38,001), more than the 50,000 entries a run may model: use --iterations 11 or "
        "fewer")


def test_compile_refuses_an_enabled_stagger_past_the_prologue():
    """What check --input refuses, compile must not emit: index 11 of a 10-entry prologue
    staggers nothing, and compile's proof would have checked one warp group."""
    from pipeline_core.api import build_named
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.config import WarpStagger
    from pipeline_core.errors import ConfigError

    schedule, target, _ = build_named("pingpong")

    class FixedStagger:
        def __init__(self, amount):
            self.amount = amount

        def __getattr__(self, name):
            return getattr(schedule, name)

        def config(self):
            return schedule.config().evolve(warp_stagger=WarpStagger.fixed(self.amount))

    assert compile_schedule(FixedStagger(4), target_name=target).execution.groups == 2
    with pytest.raises(ConfigError, match="warp_stagger.fixed_amount = 11 is invalid: a "
                                          "warp-stagger index in 0..10 for a prologue of 10"):
        compile_schedule(FixedStagger(11), target_name=target)


def test_an_agents_document_stripped_of_both_keys_is_never_safe(agents_doc, tmp_path):
    """Without lowering and agents, what is left is a block document with empty phases:
    its stagger index (0, the agents lowering's) contradicts its disabled stagger, and with
    that repaired its empty kernel computes nothing."""
    doc = json.loads(json.dumps(agents_doc))
    del doc["lowering"], doc["agents"]
    refused = _check(tmp_path, doc)
    assert refused.exit_code == 2
    assert "warp_stagger_index: must be 1 or more (past the prologue's 0 entries)" in refused.stderr
    doc["warp_stagger_index"] = 1
    unsafe = _check(tmp_path, doc)
    assert unsafe.exit_code == 1
    assert "warpspecialized-gemm: UNSAFE: MISSING_PRODUCT at kernel[0]" in unsafe.stdout
