"""``export --format dot``: the body's dependency graph through networkx, on ping-pong and 4-wave.

The DOT text is parsed back with networkx's pydot reader when pydot is installed, and always
with the small parser below (pydot is not a dependency of pipeline-core)."""
from __future__ import annotations

import argparse
import io
import re
import sys
import warnings
from pathlib import Path

import networkx as nx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import golden_data  # noqa: E402
from test_simulate import compile_case  # noqa: E402

from pipeline_core.edges import DepEdge  # noqa: E402
from pipeline_core.export import cli_export, dot  # noqa: E402
from pipeline_core.ops import DepKind, OpRole, ResourceKind, op  # noqa: E402

EXPECTED = {"pingpong_bf16": (24, 54), "fourwave_fp8": (24, 64)}

_ID = r'(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.]+)'
_ATTR = re.compile(rf'([A-Za-z_]+)=({_ID})')
_NODE = re.compile(rf'^({_ID}) \[(.*)\];$')
_EDGE = re.compile(rf'^({_ID}) -> ({_ID}) \[(.*)\];$')


def _unquote(text: str) -> str:
    if text.startswith('"'):
        return re.sub(r'\\(["\\])', r"\1", text[1:-1])
    return text


def parse_dot(text: str) -> nx.MultiDiGraph:
    """A parser for the DOT subset both writers produce (one statement per line); the members
    of each ``subgraph cluster_*`` land in ``g.graph["clusters"]`` (name -> node ids, in order)."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    assert re.match(rf"^digraph {_ID} {{$", lines[0]) and lines[-1] == "}", lines[0]
    g = nx.MultiDiGraph(clusters={})
    cluster = None
    for ln in lines[1:-1]:
        if m := re.match(rf"^subgraph ({_ID}) {{$", ln):
            cluster = g.graph["clusters"].setdefault(_unquote(m.group(1)), [])
        elif ln == "}" and cluster is not None:
            cluster = None
        elif cluster is not None and (m := re.match(rf"^({_ID});$", ln)):
            cluster.append(_unquote(m.group(1)))
        elif m := _EDGE.match(ln):
            attrs = {k: _unquote(v) for k, v in _ATTR.findall(m.group(3))}
            g.add_edge(_unquote(m.group(1)), _unquote(m.group(2)), key=attrs.pop("key"), **attrs)
        elif ln.startswith(("node [", "edge [")) or re.match(rf"^[a-z]+={_ID};$", ln):
            continue
        elif m := _NODE.match(ln):
            g.add_node(_unquote(m.group(1)), **{k: _unquote(v) for k, v in _ATTR.findall(m.group(2))})
        else:
            raise AssertionError(f"unparsed DOT line: {ln!r}")
    return g


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def case(request):
    return request.param


def test_graph_has_every_op_and_edge(case):
    g = dot.graph_from(compile_case(case))
    nodes, edges = EXPECTED[case]
    assert isinstance(g, nx.MultiDiGraph)
    assert (g.number_of_nodes(), g.number_of_edges()) == (nodes, edges)
    doc = golden_data.load(case)
    for i, o in enumerate(doc["body"]):
        data = g.nodes[dot.node_id(i)]
        assert (data["index"], data["role"], data["channel"], data["stage"], data["subtile"]) == (
            i, o["role_name"], o["channel"], o["stage"], o["subtile"])
        assert data["label"].startswith(f"{i}: {o['tag_name']}")
    for k, e in enumerate(doc["edges"]):
        data = g.edges[dot.node_id(e["producer"]), dot.node_id(e["consumer"]), k]
        assert (data["kind"], data["distance"]) == (e["kind"], e["distance"])


def test_edges_styled_by_kind_and_distance(case):
    g = dot.graph_from(compile_case(case))
    for _, _, data in g.edges(data=True):
        assert data["style"] == {"FLOW": "solid", "ANTI": "dashed", "OUTPUT": "dotted"}[data["kind"]]
        if data["distance"]:
            assert data["label"] == f"d={data['distance']}" and data["color"] != "black"
        else:
            assert "label" not in data and data["color"] == "black"
    kinds = {(d["kind"], d["distance"]) for _, _, d in g.edges(data=True)}
    assert ("FLOW", 0) in kinds and ("FLOW", 1) in kinds and ("ANTI", 0) in kinds


def test_each_stage_is_a_cluster_of_its_ops_in_program_order(case):
    """Issue 25: the partitions of a double buffer are boxes, so the loop-carried edges are
    the ones that cross between them; a one-stage body gets no cluster."""
    doc = golden_data.load(case)
    for writer in ("builtin", "pydot") if dot.pydot_available() else ("builtin",):
        clusters = parse_dot(dot.dumps(compile_case(case), writer=writer)).graph["clusters"]
        stages = sorted({o["stage"] for o in doc["body"]})
        assert len(stages) == 2 and list(clusters) == [f"cluster_stage{s}" for s in stages]
        for s in stages:
            assert clusters[f"cluster_stage{s}"] == [dot.node_id(i) for i, o in enumerate(doc["body"])
                                                     if o["stage"] == s]
    one_stage = [op(0, ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, channel=0),
                 op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE)]
    text = dot.to_dot(dot.build_graph(one_stage, [DepEdge(0, 1, DepKind.FLOW, 0)]),
                      writer="builtin")
    assert parse_dot(text).graph["clusters"] == {} and "subgraph" not in text


def test_builtin_dot_parses_back(case):
    text = dot.dumps(compile_case(case), writer="builtin")
    parsed = parse_dot(text)
    nodes, edges = EXPECTED[case]
    assert (parsed.number_of_nodes(), parsed.number_of_edges()) == (nodes, edges)
    styles = {d["style"] for _, _, d in parsed.edges(data=True)}
    assert styles == {"solid", "dashed"}
    assert sum(1 for _, _, d in parsed.edges(data=True) if d.get("label") == "d=1") == sum(
        1 for e in golden_data.load(case)["edges"] if e["distance"] == 1)
    assert parsed.nodes["op3"]["role"] in {r.name for r in OpRole}


def test_networkx_reads_the_dot(case):
    pytest.importorskip("pydot")
    from networkx.drawing.nx_pydot import read_dot

    nodes, edges = EXPECTED[case]
    for writer in ("pydot", "builtin"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyparsing deprecation noise inside pydot
            g = read_dot(io.StringIO(dot.dumps(compile_case(case), writer=writer)))
        assert (g.number_of_nodes(), g.number_of_edges()) == (nodes, edges)


def test_builtin_writer_matches_networkx_pydot_output(case):
    pytest.importorskip("pydot")
    g = dot.graph_from(compile_case(case))
    assert dot.to_dot(g, writer="builtin") == dot.to_dot(g, writer="pydot")


def test_auto_writer_without_pydot(monkeypatch, case):
    monkeypatch.setitem(sys.modules, "pydot", None)  # import pydot -> ImportError
    assert not dot.pydot_available()
    g = dot.graph_from(compile_case(case))
    assert dot.to_dot(g) == dot.to_dot(g, writer="builtin")
    with pytest.raises(ValueError):
        dot.to_dot(g, writer="graphviz")


def test_quoting_of_awkward_names():
    body = [op(0, ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, channel=0),
            op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE)]
    g = dot.build_graph(body, [DepEdge(0, 1, DepKind.FLOW, 0), DepEdge(0, 1, DepKind.ANTI, 2)],
                        {0: 'LOAD "A"\nx'}, name="weird \"name\"")
    text = dot.to_dot(g, writer="builtin")
    parsed = parse_dot(text)
    assert parsed.number_of_edges() == 2  # both edges between the same ops survive
    assert parsed.nodes["op0"]["op"].startswith('LOAD "A"')
    assert "\n" not in parsed.nodes["op0"]["op"]  # real newlines are written as \n escapes
    styles = sorted(d["style"] for _, _, d in parsed.edges(data=True))
    assert styles == ["dashed", "solid"]


def test_graph_from_document_equals_graph_from_compiled(case):
    src = compile_case(case)
    if isinstance(src, dict):
        pytest.skip("schedule plugins not installed")
    a, b = dot.graph_from(src), dot.graph_from(golden_data.load(case))
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert list(a.edges(keys=True, data=True)) == list(b.edges(keys=True, data=True))


def test_run_writes_dot(tmp_path, capsys, case):
    parser = argparse.ArgumentParser()
    cli_export.add_arguments(parser)
    path = tmp_path / "g.dot"
    assert cli_export.run(parser.parse_args(["-o", str(path)]), compile_case(case)) == 0
    parsed = parse_dot(path.read_text())
    assert (parsed.number_of_nodes(), parsed.number_of_edges()) == EXPECTED[case]
    summary, _ = capsys.readouterr()  # a file export summarises on stdout, as every format does
    nodes, edges = EXPECTED[case]
    assert summary.startswith(f"wrote {path}\ndependency graph: {nodes} ops, {edges} edges")
    assert cli_export.run(parser.parse_args(["--format", "dot"]), compile_case(case)) == 0
    out, err = capsys.readouterr()
    assert parse_dot(out).number_of_edges() == EXPECTED[case][1] and err == ""


def test_a_body_lowered_through_the_sync_model_is_not_boxed_by_its_stage_field():
    """Issue 39: a ring body's ``stage`` is the schedule's own index (the multistage GEMM's MMA
    row block), not a double-buffer partition: boxing it as "stage N" misread it; its document
    (which names its lowering) gets no box either."""
    pytest.importorskip("pipeline_core_nvidia_h100")
    from pipeline_core.api import compile_named
    from pipeline_core.document import to_document

    compiled = compile_named("multistage-gemm", target="h100")
    assert len({o.stage for o in compiled.body}) > 1  # the field varies: a box per value before
    for source in (compiled, to_document(compiled)):
        g = dot.graph_from(source)
        assert not g.graph.get(dot.CLUSTERS)
        assert {data["group"] for _, data in g.nodes(data=True)} == {"body"}
        assert "subgraph" not in dot.to_dot(g, writer="builtin")
