"""Sources of throwaway plugins that misbehave, one way each (issue 14's list and more).

``BASE`` is a shared helper module (a toy target and two tiny schedules that compile);
every ``Case`` is one plugin module written next to it, loaded with ``--plugin`` (or,
for a few, as a real distribution through a hand-written ``.dist-info``), and run
through the CLI with ``argv``.  ``stage`` says when the misbehaviour happens: at
``load`` time the plugin is reported and the command still works (exit 0, exit 3 under
``--strict-plugins``); at ``run`` time the command fails with exit 3 naming the plugin.
"""
from __future__ import annotations

import textwrap

import attrs

BASE_MODULE = "misbehave_base"

BASE = '''
"""Shared parts of the misbehaving test plugins: a toy target and two tiny schedules."""
from pipeline_core import hookimpl
from pipeline_core.config import BlockSizing, PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.ops import KOffset, OpRole, ResourceKind, logical
from pipeline_core.schedule import ScheduleRecord, TargetRecord

LOAD_A, LOAD_B, FRAG_A, FRAG_B, MMA = range(5)
COSTS = CostModel({
    LOAD_A: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_A"),
    LOAD_B: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_B"),
    FRAG_A: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_A"),
    FRAG_B: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_B"),
    MMA: OpCost(ResourceKind.MMA_UNIT, 32, OpRole.COMPUTE, vgpr_def=8, name="MMA"),
})


def double_target():
    return TargetProfile(COSTS, PipelineConfig(m_mmas=1, n_mmas=1, block_sizing=BlockSizing(4, 2, 0),
                                               vm_per_load_a=1, vm_per_load_b=1))


def single_target():
    return TargetProfile(COSTS, PipelineConfig(depth=1, num_partitions=1, m_mmas=1, n_mmas=1))


class Double:
    """Two partitions of a 1x1 MMA grid (the hello example's shape)."""

    def __init__(self, name, target, sched=None):
        self.name = name
        self.target = target
        self.sched = sched or self.default_config()

    @staticmethod
    def default_config():
        return ScheduleConfig(wait_lgkm_first=1, wait_vm_last=1)

    def config(self):
        return self.target.pipeline

    def build_body(self):
        ops = []
        for p in (0, 1):
            k = KOffset.K0 if p == 0 else KOffset.K1
            ops += [logical(FRAG_A, channel=0, stage=p), logical(FRAG_B, channel=1, stage=p),
                    logical(LOAD_A, channel=0, stage=p, k_offset=k),
                    logical(LOAD_B, channel=1, stage=1 - p,
                            k_offset=KOffset.K_PREV if p == 0 else KOffset.K0),
                    logical(MMA, stage=0, subtile=0)]
        return annotate(ops, COSTS)

    def schedule_config(self):
        return self.sched


class Single(Double):
    """Single buffer: one fragment load feeding one MMA."""

    def build_body(self):
        return annotate([logical(FRAG_A, channel=0), logical(MMA)], COSTS)

    @staticmethod
    def default_config():
        return ScheduleConfig()


def plugin(name, cls=Double, *, single=False, factory=None, target_factory=None):
    """The registration hooks of a plugin with schedule NAME on its own target NAME-gpu."""
    gpu = name + "-gpu"
    make_target = target_factory or (single_target if single else double_target)
    build = factory or (lambda ctx: cls(name, ctx.make_target(),
                                        ctx.schedule_config(cls.default_config())))

    @hookimpl
    def pipeline_core_register_targets():
        return [TargetRecord(gpu, "toy target", make_target)]

    @hookimpl
    def pipeline_core_register_schedules():
        return [ScheduleRecord(name, "toy schedule", build, default_target=gpu)]

    return pipeline_core_register_targets, pipeline_core_register_schedules
'''

HEADER = ("from pipeline_core import hookimpl\n"
          "from pipeline_core.schedule import KernelTransform, ScheduleRecord, StrategyRecord, "
          "TargetRecord\n"
          f"from {BASE_MODULE} import Double, Single, double_target, plugin\n")


@attrs.frozen(kw_only=True)
class Case:
    """One misbehaving plugin and the command that meets its misbehaviour."""

    id: str
    source: str  #: module body (after HEADER); NAME is the schedule name
    argv: tuple[str, ...]  #: NAME is replaced by the schedule name
    stage: str  #: "load" or "run" (see the module docstring)
    needles: tuple[str, ...]  #: what stderr must say besides the plugin (hook, problem)
    env: tuple[tuple[str, str], ...] = ()
    autoload: bool = False  #: also load the installed plugins (the case collides with one)
    exit_code: int | None = None  #: without --strict-plugins (default: 0 at load, 3 at run)

    @property
    def module(self) -> str:
        return "mis_" + self.id.replace("-", "_")

    @property
    def schedule(self) -> str:
        return "mis-" + self.id

    def text(self) -> str:
        return HEADER + self.source.replace("NAME", self.schedule)

    def command(self) -> list[str]:
        return [a.replace("NAME", self.schedule) for a in self.argv]

    @property
    def expected_exit(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        return 0 if self.stage == "load" else 3

    @property
    def wants_json(self) -> bool:
        return "--json" in self.argv or ("--format" in self.argv and "json" in self.argv)


#: --allow-unsafe: these throwaway targets declare no sync model, so a plain compile refuses
#: them as unprovable (docs/guide/checker.md, "Compile proves what it emits"); the suite is about plugins
COMPILE = ("compile", "NAME", "--format", "json", "--allow-unsafe")
LIST = ("plugins", "--json")
STANDARD = "pipeline_core_register_targets, pipeline_core_register_schedules = plugin('NAME'{})\n"


def d(text: str) -> str:
    """A dedented source fragment (fragments are joined, so each is dedented on its own)."""
    return textwrap.dedent(text)


def standard(extra: str = "") -> str:
    return STANDARD.format(extra)


CASES: tuple[Case, ...] = (
    # --- import and registration -------------------------------------------------
    Case(id="exit-at-import", source="import sys\nsys.exit(3)\n", argv=LIST, stage="load",
         needles=("import failed", "sys.exit(3)")),
    Case(id="argparse-at-import", source=d("""
        import argparse
        parser = argparse.ArgumentParser(prog="my-plugin")
        parser.add_argument("--needed", required=True)
        parser.parse_args()
        """), argv=LIST, stage="load", needles=("import failed", "sys.exit(2) (argparse")),
    Case(id="exit-in-register-hook", source=d("""
        import sys

        @hookimpl
        def pipeline_core_register_targets():
            sys.exit("no targets today")
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_targets", "sys.exit('no targets today')")),
    Case(id="register-junk", source=d("""
        @hookimpl
        def pipeline_core_register_schedules():
            return 5
        """), argv=LIST, stage="load", needles=("pipeline_core_register_schedules", "returned int")),
    # records with invalid names (issue 23): the plugin is named, not a user's input error
    Case(id="target-bad-name", source=d("""
        @hookimpl
        def pipeline_core_register_targets():
            return [TargetRecord("Bad Name", "an invalid name", double_target)]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_targets failed",
                  "TargetRecord.name = 'Bad Name' is invalid")),
    Case(id="schedule-bad-name", source=d("""
        @hookimpl
        def pipeline_core_register_schedules():
            return [ScheduleRecord("Bad/Name", "an invalid name", lambda ctx: None)]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_schedules failed",
                  "ScheduleRecord.name = 'Bad/Name' is invalid")),
    Case(id="strategy-blank-name", source=d("""
        @hookimpl
        def pipeline_core_register_strategies():
            return [StrategyRecord("  ", "a blank name", lambda request: [])]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_strategies failed",
                  "StrategyRecord.name = '  ' is invalid")),
    Case(id="emitter-empty-name", source=d("""
        from pipeline_core.emitters import EmitterRecord

        @hookimpl
        def pipeline_core_register_emitters():
            return [EmitterRecord("", "an empty name", (), lambda compiled: "")]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_emitters failed", "EmitterRecord.name = '' is invalid")),
    Case(id="command-bad-name", source=d("""
        from pipeline_core.commands import CommandRecord

        @hookimpl
        def pipeline_core_register_commands():
            return [CommandRecord(name="Do It", help="an invalid name",
                                  add_arguments=lambda parser: None, run=lambda args, host: 0)]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_commands failed",
                  "CommandRecord.name = 'Do It' is invalid")),
    Case(id="add-arguments-config-error", source=d("""
        from pipeline_core.commands import CommandRecord
        from pipeline_core.errors import ConfigError

        def add_arguments(parser):  # sees no user input: its error is the plugin's
            raise ConfigError("MyCommand", "level", 9, "0..3")

        @hookimpl
        def pipeline_core_register_commands():
            return [CommandRecord(name="NAME", help="a command", add_arguments=add_arguments,
                                  run=lambda args, host: 0)]
        """), argv=LIST, stage="load",
         needles=("add_arguments of command 'NAME'", "MyCommand.level = 9 is invalid")),
    Case(id="record-validators-off", source=d("""
        import attrs

        @hookimpl
        def pipeline_core_register_targets():
            with attrs.validators.disabled():  # the record is built unchecked
                return [TargetRecord("Bad Name", "an invalid name", double_target)]
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_targets failed",
                  "TargetRecord.name = 'Bad Name' is invalid")),
    Case(id="bad-name-at-import", source='BAD = TargetRecord("Bad Name", "x", double_target)\n',
         argv=LIST, stage="load", needles=("import failed", "TargetRecord.name = 'Bad Name'")),
    # KeyboardInterrupt raised by the plugin itself, no Ctrl-C pressed (issue 23)
    Case(id="interrupt-at-import", source="raise KeyboardInterrupt\n", argv=LIST, stage="load",
         needles=("import failed", "it raised KeyboardInterrupt, but no Ctrl-C was pressed")),
    Case(id="interrupt-in-register-hook", source=d("""
        @hookimpl
        def pipeline_core_register_schedules():
            raise KeyboardInterrupt("stop")
        """), argv=LIST, stage="load",
         needles=("pipeline_core_register_schedules failed", "raised KeyboardInterrupt")),
    Case(id="no-hooks", source="VALUE = 1  # a module, but no plugin\n", argv=LIST, stage="load",
         needles=("implements no pipeline-core hook", "check the module name")),
    Case(id="slow-import", source=standard(), argv=COMPILE, stage="load",
         env=(("PIPELINE_CORE_SLOW_IMPORT_S", "0"),), needles=("to import", "threshold 0 s")),
    Case(id="print-at-import", source="print('hello from a chatty plugin')\n" + standard(),
         argv=COMPILE, stage="load",
         needles=("hello from a chatty plugin", "wrote to standard output in import")),
    Case(id="duplicate-target", autoload=True, source=d("""
        _own = plugin("NAME")  # a tuple: only module-level hook functions are hooks
        pipeline_core_register_schedules = _own[1]

        @hookimpl
        def pipeline_core_register_targets():
            return [TargetRecord("mi355x", "a second mi355x", double_target)] + _own[0]()
        """), argv=("compile", "pingpong", "--format", "json"), stage="load", exit_code=3,
         needles=("target 'mi355x' is provided by", "pipeline-core-amd-mi355x")),
    Case(id="duplicate-schedule-and-strategy", autoload=True, source=d("""
        @hookimpl
        def pipeline_core_register_schedules():
            return [ScheduleRecord("4wave", "a second 4wave", lambda ctx: None)]

        @hookimpl
        def pipeline_core_register_strategies():
            return [StrategyRecord("GREEDY", "a second GREEDY", lambda request: [])]
        """), argv=("compile", "4wave", "--format", "json"), stage="load", exit_code=3,
         needles=("schedule '4wave' is provided by", "pipeline-core-schedules-4wave",
                  "strategy 'GREEDY' is provided by")),
    # --- hooks while a command runs --------------------------------------------------
    Case(id="print-in-hook", source=standard() + d("""
        @hookimpl
        def pipeline_core_derive_edges(schedule, body, config):
            print("deriving nothing")
            return None
        """), argv=COMPILE, stage="run", exit_code=0,
         needles=("deriving nothing", "wrote to standard output in hook pipeline_core_derive_edges")),
    Case(id="exit-in-hook", source=standard() + d("""
        import sys

        @hookimpl
        def pipeline_core_derive_edges(schedule, body, config):
            sys.exit(1)
        """), argv=COMPILE, stage="run", needles=("hook pipeline_core_derive_edges", "sys.exit(1)")),
    Case(id="interrupt-in-hook", source=standard() + d("""
        @hookimpl
        def pipeline_core_derive_edges(schedule, body, config):
            raise KeyboardInterrupt
        """), argv=COMPILE, stage="run",
         needles=("hook pipeline_core_derive_edges", "raised KeyboardInterrupt, but no Ctrl-C")),
    Case(id="interrupt-in-build-body", source=d("""
        class Bad(Double):
            def build_body(self):
                raise KeyboardInterrupt
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_body() of schedule 'NAME'", "raised KeyboardInterrupt")),
    Case(id="derive-edges-int", source=standard() + d("""
        @hookimpl
        def pipeline_core_derive_edges(schedule, body, config):
            return 7
        """), argv=COMPILE, stage="run", needles=("hook pipeline_core_derive_edges", "returned int")),
    Case(id="own-derive-edges-int", source=d("""
        class Bad(Double):
            def derive_edges(self, body):
                return 7
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("derive_edges() of schedule 'NAME'", "returned int")),
    Case(id="kernel-transforms-raise", source=standard(", Single, single=True") + d("""
        @hookimpl
        def pipeline_core_kernel_transforms(schedule, target, config):
            raise RuntimeError("transforms exploded")
        """), argv=COMPILE, stage="run",
         needles=("hook pipeline_core_kernel_transforms", "RuntimeError: transforms exploded")),
    Case(id="kernel-transforms-junk", source=standard(", Single, single=True") + d("""
        @hookimpl
        def pipeline_core_kernel_transforms(schedule, target, config):
            return ["not a transform"]
        """), argv=COMPILE, stage="run",
         needles=("hook pipeline_core_kernel_transforms", "item 0 is str")),
    Case(id="transform-raises", source=standard(", Single, single=True") + d("""
        @hookimpl
        def pipeline_core_kernel_transforms(schedule, target, config):
            return [KernelTransform("divide", lambda kernel, body, cfg: 1 // 0)]
        """), argv=COMPILE, stage="run",
         needles=("kernel transform 'divide'", "ZeroDivisionError")),
    Case(id="transform-junk", source=standard(", Single, single=True") + d("""
        @hookimpl
        def pipeline_core_kernel_transforms(schedule, target, config):
            return [KernelTransform("junk", lambda kernel, body, cfg: 42)]
        """), argv=COMPILE, stage="run", needles=("kernel transform 'junk'", "returned int")),
    Case(id="strategy-raises", source=standard() + d("""
        @hookimpl
        def pipeline_core_register_strategies():
            def order(request):
                raise KeyError("no order")
            return [StrategyRecord("MIS_RAISE", "raises", order)]
        """), argv=COMPILE + ("-c", "scheduling=MIS_RAISE"), stage="run",
         needles=("strategy 'MIS_RAISE'", "KeyError")),
    Case(id="strategy-junk", source=standard() + d("""
        @hookimpl
        def pipeline_core_register_strategies():
            return [StrategyRecord("MIS_JUNK", "returns a string", lambda request: "abc")]
        """), argv=COMPILE + ("-c", "scheduling=MIS_JUNK"), stage="run",
         needles=("strategy 'MIS_JUNK'", "returned str")),
    Case(id="bootstrap-frags-junk", source=standard() + d("""
        @hookimpl
        def pipeline_core_bootstrap_frags(schedule):
            return [1, 2]
        """), argv=COMPILE, stage="run", needles=("hook pipeline_core_bootstrap_frags", "item 0 is int")),
    Case(id="explicit-blocks-non-ops", source=standard() + d("""
        @hookimpl
        def pipeline_core_explicit_blocks(schedule, body, program):
            return [["not an op"], []]
        """), argv=COMPILE, stage="run",
         needles=("hook pipeline_core_explicit_blocks", "holding str at position 0")),
    Case(id="own-explicit-blocks-non-ops", source=d("""
        class Bad(Double):
            def build_explicit_blocks(self, body, program):
                return [[1], [2]]
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_explicit_blocks() of schedule 'NAME'", "holding int")),
    # --- factories and schedule methods -------------------------------------------------
    Case(id="factory-none", source=standard(", factory=lambda ctx: None"), argv=COMPILE,
         stage="run", needles=("factory of schedule 'NAME'", "returned None")),
    Case(id="factory-exits", source="import sys\n" + standard(", factory=lambda ctx: sys.exit(0)"),
         argv=COMPILE, stage="run", needles=("factory of schedule 'NAME'", "sys.exit(0)")),
    Case(id="target-factory-raises", source=d("""
        def broken():
            raise OSError("no such GPU")
        """) + standard(", target_factory=broken"), argv=COMPILE, stage="run",
         needles=("factory of target 'NAME-gpu'", "OSError: no such GPU")),
    Case(id="config-junk", source=d("""
        class Bad(Double):
            def config(self):
                return {"depth": 2}
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("config() of schedule 'NAME'", "returned dict")),
    Case(id="build-body-raises", source=d("""
        class Bad(Double):
            def build_body(self):
                raise ValueError("no body today")
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_body() of schedule 'NAME'", "ValueError: no body today")),
    Case(id="build-body-none", source=d("""
        class Bad(Double):
            def build_body(self):
                return None
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_body() of schedule 'NAME'", "returned None")),
    Case(id="build-body-recursion", source=d("""
        class Bad(Double):
            def build_body(self):
                return self.build_body()
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_body() of schedule 'NAME'", "RecursionError")),
    Case(id="build-body-non-ops", source=d("""
        class Bad(Double):
            def build_body(self):
                return super().build_body() + ["an extra op"]
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("build_body() of schedule 'NAME'", "item 10 is str")),
    Case(id="schedule-config-junk", source=d("""
        class Bad(Double):
            def schedule_config(self):
                return "CSP"
        """) + standard(", Bad"), argv=COMPILE, stage="run",
         needles=("schedule_config() of schedule 'NAME'", "returned str")),
)
