"""The Live page's token-tree view (issue 16): one row-step's tree, and acceptance by depth x sibling rank.

Pure functions from a version-3 trace (rows with "tree": token, parent, depth, prob, rank, path)
to plotly figures, plus ``section``, the Streamlit block the Live page calls with one line. Chain
runs have no "tree" rows: ``section`` draws nothing for them, so they look as before.

Node roles in one row-step (the tree rule of specviz.engine.tree walks from the root, trying the
children of the current node in rank order):
  accepted     on the accepted path
  rejected     a child of a reached node (the root or an accepted node), tried and refused: every
               child when none was accepted, else the siblings ranked before the accepted one
  not tried    siblings ranked after the accepted child (the walk had moved on)
  not reached  below a node that was not accepted
and the step's own token, added as a child of the last accepted node: **recovered** when that node
had children (all refused), **bonus** when it was a leaf (a full path). A row that hit its token
limit inside the tree has no such token.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from specviz.analysis import acceptance
from specviz.analysis.treestats import acceptance_by_depth_rank, expected_tree_tokens, rates
from specviz.figures.charts import KIND_COLORS, Decode, _empty, _text, style

# Shape = the draft that proposed a node (the trace's tree "origin"); traces from before it was kept draw circles
ORIGIN_SYMBOLS = {"model": "circle", "suffix": "diamond", "ngram": "triangle-up", "both": "star"}
ORIGIN_NAMES = {"model": "the model draft", "suffix": "the suffix structure", "ngram": "prompt lookup",
                "both": "the model draft and the suffix structure"}
ROLE_COLORS = {"root": "#444444", "accepted": KIND_COLORS["accepted"], "rejected": "#d62728",
               "not tried": "#bbbbbb", "not reached": "#e5e5e5", "recovered": KIND_COLORS["recovered"],
               "bonus": KIND_COLORS["bonus"]}


def has_trees(trace: dict) -> bool:
    return any(r.get("tree") for s in trace.get("steps", []) for r in s["rows"])


def tree_steps(trace: dict, row: int) -> list[int]:
    """Positions in trace["steps"] where row ``row`` was active with a tree."""
    return [n for n, s in enumerate(trace.get("steps", []))
            if any(r.get("index") == row and r.get("active", True) and r.get("tree") for r in s["rows"])]


def tree_rows(trace: dict) -> list[int]:
    return sorted({r["index"] for s in trace.get("steps", []) for r in s["rows"] if r.get("tree")})


# ---- one row-step's tree ----------------------------------------------------------------------

def node_roles(tree: dict, emitted: list[int]) -> tuple[list[str], str | None]:
    """(role of each node, role of the step's own token: "recovered" / "bonus" / None if cut off)."""
    parents, ranks, path = tree["parent"], tree["rank"], list(tree["path"])
    on_path = set(path)
    reached = {-1, *path}
    accepted_rank = {parents[i]: ranks[i] for i in path}  # reached node -> rank of its accepted child
    roles = []
    for i, p in enumerate(parents):
        if i in on_path:
            roles.append("accepted")
        elif p not in reached:
            roles.append("not reached")
        elif p in accepted_rank and ranks[i] > accepted_rank[p]:
            roles.append("not tried")
        else:
            roles.append("rejected")
    last = path[-1] if path else -1
    final = None
    if len(emitted) > len(path):
        final = "recovered" if any(p == last for p in parents) else "bonus"
    return roles, final


def layout(parents: list[int]) -> tuple[list[int], list[float]]:
    """(depth, y) per node, root excluded: leaves get consecutive y in depth-first order (children
    in index order = rank order), a parent sits at its children's mean; the root is at depth 0."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    y: dict[int, float] = {}
    depth: dict[int, int] = {-1: 0}
    leaf = 0.0

    def place(v: int) -> None:
        nonlocal leaf
        for c in kids.get(v, []):
            depth[c] = depth[v] + 1
            place(c)
        if v not in kids:
            y[v], leaf = leaf, leaf + 1
        else:
            y[v] = sum(y[c] for c in kids[v]) / len(kids[v])

    place(-1)
    return [depth[i] for i in range(len(parents))], [y[i] for i in range(len(parents))] + [y[-1]]


def tree_row(trace: dict, row: int, step_pos: int) -> dict | None:
    """Row ``row``'s record with a tree at step position ``step_pos``, or None."""
    steps = trace.get("steps", [])
    if not 0 <= step_pos < len(steps):
        return None
    return next((x for x in steps[step_pos]["rows"] if x.get("index") == row and x.get("tree")), None)


def tree_figure(trace: dict, row: int, step_pos: int, decode: Decode | None = None) -> go.Figure:
    """Row ``row``'s tree at step position ``step_pos``: nodes by depth (x) and branch (y), the
    accepted path's edges bold, colour = role; hover shows the token, draft probability and rank."""
    steps = trace.get("steps", [])
    title = "Token tree of one row-step"
    r = tree_row(trace, row, step_pos)
    if r is None:
        return _empty(title, "no tree for this row and step")
    t = r["tree"]
    emitted = list(r["emitted"])
    roles, final = node_roles(t, emitted)
    parents = list(t["parent"])
    tokens = list(t["token"])
    probs = t.get("prob") or [None] * len(tokens)
    origin = list(t.get("origin") or [])
    path = list(t["path"])
    if final is not None:  # the step's own token hangs off the last accepted node
        parents.append(path[-1] if path else -1)
        tokens.append(emitted[len(path)])
        probs.append(None)
        roles.append(final)
        origin += ["target"] * bool(origin)  # the target's own token: no draft proposed it
    depth, y = layout(parents)
    root_y = y[-1]
    pos = lambda i: (0, root_y) if i < 0 else (depth[i], y[i])  # noqa: E731
    fig = go.Figure()
    for bold in (False, True):
        xs, ys = [], []
        for i, p in enumerate(parents):
            if (roles[i] in ("accepted", "recovered", "bonus")) == bold:
                (x0, y0), (x1, y1) = pos(p), pos(i)
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line={"color": "#2ca02c" if bold else "#cccccc", "width": 3 if bold else 1}))
    fig.add_trace(go.Scatter(x=[0], y=[root_y], mode="markers+text", text=["last token"], textposition="middle left",
                             marker={"size": 14, "color": ROLE_COLORS["root"], "symbol": "square"}, name="root",
                             hovertemplate="the row's last token (verify slot 0)<extra></extra>"))
    for role in ROLE_COLORS:
        idx = [i for i, x in enumerate(roles) if x == role]
        if not idx:
            continue
        labels = [_text([tokens[i]], decode) for i in idx]
        ranks = t["rank"]
        hover = [f"<b>{html.escape(repr(lbl))}</b> (id {tokens[i]})<br>{role}, depth {depth[i]}"
                 + (f", sibling rank {ranks[i]}" if i < len(ranks) else "")
                 + (f", draft p {probs[i]:.3f}" if probs[i] is not None else "")  # an n-gram tree has none
                 + (f"<br>proposed by {ORIGIN_NAMES[origin[i]]}" if i < len(origin) and origin[i] in ORIGIN_NAMES else "")
                 for i, lbl in zip(idx, labels)]
        fig.add_trace(go.Scatter(
            x=[depth[i] for i in idx], y=[y[i] for i in idx], mode="markers+text", name=role,
            text=[html.escape(lbl[:10]) for lbl in labels], textposition="top center", hovertext=hover,
            hovertemplate="%{hovertext}<extra></extra>",
            marker={"size": 13, "color": ROLE_COLORS[role], "line": {"width": 1, "color": "#555555"},
                    "symbol": [ORIGIN_SYMBOLS.get(origin[i], "circle") if i < len(origin) else "circle" for i in idx]}))
    for o in [o for o in ORIGIN_SYMBOLS if o in origin]:  # the shapes' legend: one entry per draft seen
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"from {ORIGIN_NAMES[o]}",
                                 marker={"size": 12, "color": "#ffffff", "symbol": ORIGIN_SYMBOLS[o],
                                         "line": {"width": 2, "color": "#333333"}}))
    n_acc = len(path)
    kind = f", then a {final} token" if final else " (token limit reached)"
    return style(fig, f"Token tree: row {row}, step {steps[step_pos]['step']}: {len(t['token'])} drafted nodes, "
                      f"{n_acc} accepted{kind}", max(300, 80 + 26 * (max(y, default=0) + 1)),
                 xaxis={"title": "depth (0 = the row's last token)", "dtick": 1, "tickformat": "d"},
                 yaxis={"visible": False, "autorange": "reversed"}, legend={"orientation": "h", "y": -0.15})


# ---- acceptance by depth x sibling rank -------------------------------------------------------

def depth_rank_heatmap(trace: dict) -> go.Figure:
    """a(depth, rank) = accepted / tried over every tree row-step (specviz.analysis.treestats)."""
    title = "Tree acceptance by depth x sibling rank (accepted / tried)"
    counts = acceptance_by_depth_rank(trace.get("steps", []))
    if not counts:
        return _empty(title, "no tree steps yet")
    D = max(d for d, _ in counts)
    R = max(r for _, r in counts) + 1
    z = [[None] * R for _ in range(D)]
    text = [[""] * R for _ in range(D)]
    for (d, r), (a, n) in counts.items():
        z[d - 1][r] = a / n if n else None
        text[d - 1][r] = f"{a}/{n}"
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"rank {r}" + (" (top guess)" if r == 0 else "") for r in range(R)],
        y=[f"depth {d}" for d in range(1, D + 1)], text=text, texttemplate="%{text}", zmin=0, zmax=1,
        colorscale="Greens", colorbar={"title": "a(d, r)"}, hoverongaps=False,
        hovertemplate="%{y}, %{x}: accepted %{text} tried (%{z:.2f})<extra></extra>"))
    return style(fig, title, max(260, 90 + 34 * D), yaxis={"autorange": "reversed"})


def predicted_vs_measured(trace: dict) -> tuple[float, float] | None:
    """(predicted, measured) output tokens per tree row-step: our formula (treestats) under the run's
    own a(depth, rank), against the measured mean acceptance length (acceptance.mean_acceptance_length: 1 +
    accepted per row-step). None without tree steps."""
    rows = [r for s in trace.get("steps", []) for r in s["rows"] if r.get("tree") and r.get("active", True)]
    if not rows:
        return None
    a = rates(acceptance_by_depth_rank(trace["steps"]))
    t = [r["tree"] for r in rows]
    predicted = sum(expected_tree_tokens(x["parent"], x["depth"], x["rank"], a) for x in t) / len(rows)
    return predicted, acceptance.mean_acceptance_length(sum(r["accepted"] for r in rows), len(rows))


def origin_sentence(trace: dict) -> str | None:
    """The shapes' legend in words, with each draft's nodes and accepted nodes over the run; None unless some
    tree came from the suffix structure (a hybrid or suffix run)."""
    counts: dict[str, list[int]] = {}  # origin -> [drafted, accepted]
    for s in trace.get("steps", []):
        for r in s["rows"]:
            t = r.get("tree") or {}
            on_path = set(t.get("path", []))
            for i, o in enumerate(t.get("origin") or []):
                c = counts.setdefault(o, [0, 0])
                c[0] += 1
                c[1] += i in on_path
    if not any(o in counts for o in ("suffix", "both")):
        return None
    parts = [f"{'◆' if o == 'suffix' else '●' if o == 'model' else '★' if o == 'both' else '▲'} {ORIGIN_NAMES[o]} "
             f"({counts[o][1]} of {counts[o][0]} nodes accepted)" for o in ORIGIN_SYMBOLS if o in counts]
    return ("Shape says which draft proposed a node: " + ", ".join(parts) + ". The suffix structure proposes what "
            "followed this text before, in this request and earlier ones; it costs no model forward.")


# ---- each chart in a sentence, from the same numbers ----------------------------------------------

def tree_sentence(trace: dict, row: int, step_pos: int) -> str:
    """One row-step's tree: nodes drafted, nodes accepted along the path, and the token the target added."""
    r = tree_row(trace, row, step_pos)
    if r is None:
        return "No tree for this row and step."
    roles, final = node_roles(r["tree"], list(r["emitted"]))
    then = f"then the target added a {final} token" if final else "then the row reached its token limit"
    return (f"Row {row} at step {trace['steps'][step_pos]['step']}: the draft proposed {len(roles)} nodes and **the "
            f"target accepted {roles.count('accepted')} of them** along one path; {then}.")


def depth_rank_sentence(trace: dict) -> str:
    """The depth x rank heatmap: the top guess at depth 1, and the cell that accepted least."""
    counts = {key: (a, n) for key, (a, n) in acceptance_by_depth_rank(trace.get("steps", [])).items() if n}
    if not counts:
        return "No tree steps yet: this chart fills in as the run goes."
    (d, r), (a, n) = min(counts.items(), key=lambda kv: kv[1][0] / kv[1][1])
    first = counts.get((1, 0))
    lead = (f"**The top guess at depth 1 was accepted in {first[0]} of {first[1]} tries ({first[0] / first[1]:.2f})**; "
            if first else "")
    low = f"the lowest rate, {a / n:.2f} ({a} of {n}), was at depth {d}, rank {r}."
    return lead + low if lead else low[:1].upper() + low[1:]


# ---- the Live page's block --------------------------------------------------------------------

def section(trace: dict, decode: Decode | None = None) -> None:
    """Draw the tree of a chosen row and step and the depth x rank heatmap; nothing for chain runs."""
    if not has_trees(trace):
        return
    import streamlit as st

    st.subheader("Token trees")
    rows = tree_rows(trace)
    c1, c2 = st.columns([1, 4])
    row = c1.selectbox("tree of row", rows, key="tree_row", format_func=lambda i: f"row {i}")
    at = tree_steps(trace, row)
    if len(at) > 1:
        if st.session_state.get("tree_step_of_row", 0) >= len(at):
            st.session_state["tree_step_of_row"] = len(at) - 1
        n = c2.slider("step of this row", 0, len(at) - 1, key="tree_step_of_row")
    else:
        n = 0
    left, right = st.columns(2)
    left.plotly_chart(tree_figure(trace, row, at[n], decode), key="tree_view")
    left.caption(tree_sentence(trace, row, at[n]))
    if legend := origin_sentence(trace):
        left.caption(legend)
    right.plotly_chart(depth_rank_heatmap(trace), key="tree_depth_rank")
    right.caption(depth_rank_sentence(trace))
    pm = predicted_vs_measured(trace)
    if pm:
        right.caption(f"Mean acceptance length (output tokens per row-step): {pm[1]:.2f} measured, {pm[0]:.2f} predicted by our tree formula "
                      "1 + sum over nodes of the product of a(depth, rank) along its path, with this run's rates.")
