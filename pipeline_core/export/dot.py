"""The body's dependency graph as Graphviz DOT (``export --format dot``).

Why: the edge rules derive dozens of FLOW/ANTI edges with loop distances; a drawing is the
quickest way to see why an op cannot move.  A body of several stages (a double buffer's
partitions) gets one cluster per stage, its ops listed in program order, so each partition is
one box and only the loop-carried edges cross between them. The graph is a networkx ``MultiDiGraph`` (one
edge per DepEdge: a FLOW and an ANTI edge between the same two ops must both survive) whose
node and edge attributes are Graphviz attributes plus the raw fields, so it is useful as a
networkx object too (:func:`build_graph`).

Writing goes through networkx's pydot bridge when pydot is installed. pydot is not a
dependency of pipeline-core, so otherwise a small serializer writes the same graph from the
networkx attributes (every id and value quoted and escaped); both outputs parse back with
``networkx.drawing.nx_pydot.read_dot`` to the same nodes, edges and attributes.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx

from pipeline_core.edges import DepEdge
from pipeline_core.export.notation import op_text as describe_op
from pipeline_core.ops import MAX_KERNEL_TAG, DepKind, Op, OpRole

#: edge style by dependency kind
KIND_STYLE = {DepKind.FLOW: "solid", DepKind.ANTI: "dashed", DepKind.OUTPUT: "dotted"}
#: edge colour by loop distance (0 = same iteration)
DISTANCE_COLOR = {0: "black", 1: "blue3", 2: "darkorchid"}
_FAR_COLOR = "red3"
ROLE_STYLE = {  # (shape, fill colour)
    OpRole.GLOBAL_LOAD: ("box", "lightskyblue"), OpRole.FRAGMENT_LOAD: ("ellipse", "palegreen"),
    OpRole.SHARED_STORE: ("box", "khaki"), OpRole.COMPUTE: ("doubleoctagon", "lightsalmon"),
    OpRole.SYNC: ("diamond", "lightgrey"), OpRole.FENCE: ("diamond", "white"),
    OpRole.VALU_COMPUTE: ("octagon", "plum"),
}


#: graph key of the clusters: (subgraph name, label, node ids in program order) per stage,
#: written after the edges by both writers (networkx's pydot bridge knows no subgraphs)
CLUSTERS = "clusters"
#: how a cluster is drawn
CLUSTER_STYLE = {"style": "rounded", "color": "grey60", "fontcolor": "grey30"}


def node_id(index: int) -> str:
    return f"op{index}"


def build_graph(body: Sequence[Op], edges: Sequence[DepEdge], names: Mapping[int, str] | None = None,
                name: str = "body", *, partitions: bool = True) -> nx.MultiDiGraph:
    """Ops as nodes (index, op, role, channel, stage, subtile), DepEdges as styled edges.

    ``partitions``: the body's ``stage`` fields are the double-buffer partitions of the
    reference's lowering, drawn as one box each.  A body lowered through the target's sync
    model (the ring and agents lowerings) uses ``stage`` as the schedule's own index (the
    multistage GEMM's MMA row block), so boxing it as "stage N" would misread it."""
    names = names or {}
    g = nx.MultiDiGraph(name=name)
    g.graph["graph"] = {"label": f"{name}: {len(body)} ops, {len(edges)} edges "
                                 "(solid FLOW, dashed ANTI, dotted OUTPUT; d = loop distance)",
                        "labelloc": "t", "rankdir": "LR", "fontname": "Helvetica",
                        # compact: one row per stage (``group``), tight spacing; loop-carried
                        # edges take no part in ranking (constraint=false below)
                        "newrank": "true", "nodesep": "0.12", "ranksep": "0.3"}
    g.graph["node"] = {"fontname": "Helvetica", "fontsize": "10", "style": "filled"}
    g.graph["edge"] = {"fontname": "Helvetica", "fontsize": "9"}
    for i, o in enumerate(body):
        shape, fill = ROLE_STYLE.get(o.role, ("box", "white"))
        ch = "-" if o.channel < 0 else ("AB"[o.channel] if o.channel < 2 else str(o.channel))
        label = f"{i}: {describe_op(o, names)}"
        g.add_node(node_id(i), label=label, shape=shape, fillcolor=fill, index=i,
                   group=f"stage{o.stage}" if partitions else "body", tooltip=f"{o.role.name} ch {ch} stage {o.stage} sub {o.subtile}",
                   op=describe_op(o, names), role=o.role.name, channel=o.channel, stage=o.stage,
                   subtile=o.subtile, k_offset=o.k_offset.name, latency=o.latency)
    for k, e in enumerate(edges):
        attrs: dict[str, Any] = {"kind": e.kind.name, "distance": e.distance, "index": k,
                                 "style": KIND_STYLE.get(e.kind, "solid"),
                                 "color": DISTANCE_COLOR.get(e.distance, _FAR_COLOR)}
        if e.distance:
            attrs["label"] = f"d={e.distance}"
            attrs["fontcolor"] = attrs["color"]
            attrs["constraint"] = "false"  # loop-carried edges should not stretch the ranks
        g.add_edge(node_id(e.producer), node_id(e.consumer), key=k, **attrs)
    stages = sorted({o.stage for o in body})
    if partitions and len(stages) > 1:  # one box per partition, its ops in program order
        g.graph[CLUSTERS] = [(f"cluster_stage{s}", f"stage {s}",
                              [node_id(i) for i, o in enumerate(body) if o.stage == s])
                             for s in stages]
    return g


def graph_from(source: Any) -> nx.MultiDiGraph:
    """The graph of a CompiledSchedule or of a schedule document."""
    if isinstance(source, Mapping):
        from pipeline_core.document import edges_from_doc, ops_from_doc

        body = ops_from_doc(source["body"])
        edges = edges_from_doc(source["edges"])
        names = {o["tag"]: o["tag_name"] for o in source["body"] if o["tag"] <= MAX_KERNEL_TAG}
        # a document lowered through the target's sync model names its lowering (document.py)
        return build_graph(body, edges, names, str(source.get("case") or source.get("schedule", "body")),
                           partitions="lowering" not in source)
    return build_graph(source.body, source.edges, source.tag_names, source.schedule_name,
                       partitions=source.plan.template_counters)


def pydot_available() -> bool:
    try:
        import pydot  # noqa: F401
    except ImportError:
        return False
    return True


def to_dot(graph: nx.MultiDiGraph, *, writer: str = "auto") -> str:
    """DOT text; ``writer``: "pydot" (networkx's bridge), "builtin", or "auto" (pydot if installed)."""
    if writer not in ("auto", "pydot", "builtin"):
        raise ValueError(f"writer must be auto, pydot or builtin, not {writer!r}")
    if writer == "pydot" or (writer == "auto" and pydot_available()):
        import pydot
        from networkx.drawing.nx_pydot import to_pydot

        dotted = to_pydot(graph)
        for name, label, members in graph.graph.get(CLUSTERS, ()):
            cluster = pydot.Subgraph(name)
            for key, value in {"label": _value(label), **CLUSTER_STYLE}.items():
                cluster.set(key, value)
            for member in members:
                cluster.add_node(pydot.Node(member))
            dotted.add_subgraph(cluster)
        return dotted.to_string()
    return _serialize(graph)


_NUMERAL = re.compile(r"^(?:[0-9]+\.?[0-9]*|[0-9]*\.[0-9]+)$")
_IDENT = re.compile(r"^[_a-zA-Z][a-zA-Z0-9_]*$")
_KEYWORDS = frozenset({"node", "edge", "graph", "digraph", "subgraph", "strict"})


def _quoted(text: str) -> str:
    """Quoted and escaped as pydot does (quotes, newlines; backslashes stay DOT escapes)."""
    return '"' + text.translate(_ESCAPES) + '"'


_ESCAPES = {ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r"}


def _value(value: Any) -> str:
    """An attribute value, bare only where pydot leaves it bare (digits, alphanumerics, numerals)."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if text and text.lower() not in _KEYWORDS and (
            (text.isalnum() and not text[0].isdigit()) or text.isdigit() or _NUMERAL.match(text)):
        return text
    return _quoted(text)


def _id(value: Any) -> str:
    """A node or graph name: bare when it is a plain identifier or numeral."""
    text = str(value)
    if text.lower() not in _KEYWORDS and (_IDENT.match(text) or _NUMERAL.match(text)):
        return text
    return _quoted(text)


def _attr_list(attrs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in attrs.items())


def _serialize(graph: nx.MultiDiGraph) -> str:
    """DOT from the networkx graph's attributes, laid out as networkx's pydot bridge does."""
    kind = "digraph" if graph.is_directed() else "graph"
    arrow = "->" if graph.is_directed() else "--"
    lines = [f"{kind} {_quoted(str(graph.graph.get('name') or 'G'))} {{"]
    for k, v in graph.graph.get("graph", {}).items():
        lines.append(f"{k}={_value(v)};")
    for section in ("node", "edge"):
        if graph.graph.get(section):
            lines.append(f"{section} [{_attr_list(graph.graph[section])}];")
    for n, data in graph.nodes(data=True):
        lines.append(f"{_id(n)} [{_attr_list(data)}];")
    multi = graph.is_multigraph()
    for item in graph.edges(keys=True, data=True) if multi else graph.edges(data=True):
        u, v, data = (item[0], item[1], {"key": item[2], **item[3]}) if multi else item
        lines.append(f"{_id(u)} {arrow} {_id(v)} [{_attr_list(data)}];")
    for name, label, members in graph.graph.get(CLUSTERS, ()):
        lines.append(f"subgraph {_id(name)} {{")
        lines.extend(f"{k}={_value(v)};" for k, v in {"label": label, **CLUSTER_STYLE}.items())
        lines.extend(f"{_id(member)};" for member in members)
        lines.append("}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dumps(source: Any, *, writer: str = "auto") -> str:
    return to_dot(graph_from(source), writer=writer)


def write(source: Any, path: str | Path, *, writer: str = "auto") -> None:
    Path(path).write_text(dumps(source, writer=writer))
