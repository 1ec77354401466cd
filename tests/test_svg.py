"""SVG crease patterns (Origami Simulator's colours) read into edge-only FOLD dicts:
colours, opacity -> target angles, transforms and viewBox, the y flip, and the clean-up
into a planar straight-line graph (merged endpoints, T-junctions, crossings, overlaps)."""

from __future__ import annotations

import numpy as np
import pytest

from diffmb.formats import fold as fold_module
from diffmb.formats.svg import load_svg, svg_to_fold

NS = 'xmlns="http://www.w3.org/2000/svg"'


def svg(body: str, attrs: str = "") -> str:
    return f'<svg {NS} {attrs}>\n{body}\n</svg>\n'


def write(tmp_path, body, attrs="", name="cp.svg"):
    p = tmp_path / name
    p.write_text(svg(body, attrs))
    return p


def line(x1, y1, x2, y2, stroke="#ff0000", extra=""):
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{stroke}" {extra}/>'


SQUARE = '<rect x="0" y="0" width="10" height="10" stroke="#000000" fill="none"/>'


def coords(data):
    return np.array(data["vertices_coords"], float)


def edge_set(data):
    """Edges as frozensets of rounded vertex coordinates."""
    V = coords(data)
    return {frozenset(tuple(np.round(V[v], 9)) for v in e): a
            for e, a in zip(data["edges_vertices"], data["edges_assignment"])}


# --------------------------------------------------------------------------- colours and angles


def test_each_colour_maps_to_its_assignment(tmp_path):
    body = "\n".join([
        line(0, 0, 10, 0, "#ff0000"),                       # M
        line(0, 1, 10, 1, "blue"),                          # V (keyword)
        line(0, 2, 10, 2, "#000"),                          # B (short hex)
        line(0, 3, 10, 3, "rgb(0, 255, 0)"),                # C
        '<line x1="0" y1="4" x2="10" y2="4" style="stroke:#ffff00"/>',  # F (CSS style)
        line(0, 5, 10, 5, "#ff00ff"),                       # U
        line(0, 6, 10, 6, "#dd1111"),                       # M (near red, within tolerance)
        line(0, 7, 10, 7, "green"),                         # C (Origami Simulator's keyword)
    ])
    data = svg_to_fold(write(tmp_path, body), scale=1.0)
    V = coords(data)
    by_row = {round(-float(V[e[0], 1])): a for e, a in zip(data["edges_vertices"], data["edges_assignment"])}
    assert by_row == {0: "M", 1: "V", 2: "B", 3: "C", 4: "F", 5: "U", 6: "M", 7: "C"}
    assert len(data["edges_vertices"]) == 8 and len(V) == 16


def test_fold_dict_fields_and_no_faces(tmp_path):
    data = svg_to_fold(write(tmp_path, SQUARE + line(0, 0, 10, 10, "#0000ff")))
    assert data["file_spec"] == 1.2
    assert data["file_creator"] == "diffmb (from SVG)"
    assert data["frame_classes"] == ["creasePattern"]
    assert "faces_vertices" not in data
    n = len(data["edges_vertices"])
    assert len(data["edges_assignment"]) == len(data["edges_foldAngle"]) == len(data["diffmb:edges_targetAngle"]) == n
    assert all(len(c) == 2 for c in data["vertices_coords"])


def test_opacity_sets_target_angle(tmp_path):
    body = (line(0, 0, 10, 0, "#0000ff", 'stroke-opacity="0.5"')
            + line(0, 5, 10, 5, "#ff0000", 'opacity="0.25"')
            + line(0, 10, 10, 10, "#ff0000")
            + line(0, 15, 10, 15, "#ff00ff", 'stroke-opacity="0.5"'))
    p = write(tmp_path, body)
    flat = svg_to_fold(p, scale=1.0)
    V = coords(flat)
    target = {round(-float(V[e[0], 1])): t for e, t in zip(flat["edges_vertices"], flat["diffmb:edges_targetAngle"])}
    assert target == {0: pytest.approx(90.0), 5: pytest.approx(-45.0), 10: -180.0, 15: 0.0}
    assert flat["edges_foldAngle"] == [0.0] * 4  # default: a crease pattern starts flat
    opened = svg_to_fold(p, scale=1.0, angles="opacity")
    assert opened["edges_foldAngle"] == opened["diffmb:edges_targetAngle"]
    assert opened["edges_foldAngle"][0] == pytest.approx(90.0)


def test_bad_angles_argument(tmp_path):
    with pytest.raises(ValueError, match="angles must be one of"):
        svg_to_fold(write(tmp_path, line(0, 0, 1, 0)), angles="folded")


# --------------------------------------------------------------------------- geometry


def test_transform_and_viewbox_are_applied(tmp_path):
    # viewBox 100 units shown at 200 px: x2; then the group maps (x, y) -> 2 (x, y) + (10, 20)
    body = '<g transform="translate(10,20) scale(2)">' + line(0, 0, 5, 0) + line(0, 0, 0, 5, "#0000ff") + "</g>"
    data = svg_to_fold(write(tmp_path, body, 'width="200" height="200" viewBox="0 0 100 100"'), scale=1.0)
    got = {tuple(np.round(c, 9)) for c in coords(data)}
    # SVG points (20, 40), (40, 40), (20, 60) -> y flipped
    assert got == {(20.0, -40.0), (40.0, -40.0), (20.0, -60.0)}


def test_y_flip_makes_a_counter_clockwise_square(tmp_path):
    # traced counter-clockwise as seen on screen (y down): down the left side, along the bottom, up the right
    p = write(tmp_path, '<polygon points="0,0 0,10 10,10 10,0" stroke="#000000" fill="none"/>')
    data = svg_to_fold(p, scale=0.1)
    V = coords(data)
    loop = [e[0] for e in data["edges_vertices"]]
    assert [tuple(np.round(V[v], 12)) for v in loop] == [(0.0, 0.0), (0.0, -1.0), (1.0, -1.0), (1.0, 0.0)]
    x, y = V[loop, 0], V[loop, 1]
    assert (x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2 == pytest.approx(1.0)  # counter-clockwise
    assert all(np.signbit(V[:, 1]) == (V[:, 1] < 0))  # no -0.0


def test_default_scale_makes_the_sheet_one_metre_across(tmp_path):
    p = write(tmp_path, '<rect x="50" y="0" width="200" height="100" stroke="black" fill="none"/>')
    V = coords(svg_to_fold(p))
    assert np.ptp(V[:, 0]) == pytest.approx(1.0) and np.ptp(V[:, 1]) == pytest.approx(0.5)
    assert V[:, 0].min() == pytest.approx(0.25) and V[:, 1].max() == pytest.approx(0.0)


def test_crossing_diagonals_are_split(tmp_path):
    p = write(tmp_path, SQUARE + line(0, 0, 10, 10, "#ff0000") + line(10, 0, 0, 10, "#0000ff"))
    data = svg_to_fold(p, scale=1.0)
    assert len(data["vertices_coords"]) == 5
    assert len(data["edges_vertices"]) == 8
    assert sorted(data["edges_assignment"]) == ["B"] * 4 + ["M"] * 2 + ["V"] * 2
    edges = edge_set(data)
    centre = (5.0, -5.0)
    assert {a for e, a in edges.items() if centre in e} == {"M", "V"}
    assert sum(centre in e for e in edges) == 4


def test_t_junction_splits_the_segment(tmp_path):
    p = write(tmp_path, line(0, 0, 10, 0, "#000000") + line(4, 0, 4, 5, "#ff0000"))
    data = svg_to_fold(p, scale=1.0)
    assert len(data["vertices_coords"]) == 4
    assert edge_set(data) == {
        frozenset({(0.0, 0.0), (4.0, 0.0)}): "B",
        frozenset({(4.0, 0.0), (10.0, 0.0)}): "B",
        frozenset({(4.0, 0.0), (4.0, -5.0)}): "M",
    }


def test_near_coincident_endpoints_merge(tmp_path):
    p = write(tmp_path, line(0, 0, 10, 0) + line(10.000001, 0.000001, 10, 10))
    merged = svg_to_fold(p, scale=1.0)
    assert len(merged["vertices_coords"]) == 3 and len(merged["edges_vertices"]) == 2
    assert [10.0, 0.0] in merged["vertices_coords"]  # the first drawn endpoint keeps its place
    apart = svg_to_fold(p, scale=1.0, merge_tol=0.0)
    assert len(apart["vertices_coords"]) == 4


def test_zero_length_segments_are_dropped(tmp_path):
    p = write(tmp_path, line(0, 0, 10, 0) + line(3, 3, 3, 3, "#0000ff"))
    data = svg_to_fold(p, scale=1.0)
    assert data["edges_assignment"] == ["M"] and len(data["vertices_coords"]) == 2


def test_collinear_overlap_same_assignment_is_merged(tmp_path):
    p = write(tmp_path, line(0, 0, 6, 0) + line(4, 0, 10, 0))
    data = svg_to_fold(p, scale=1.0)
    assert len(data["vertices_coords"]) == 4
    assert len(data["edges_vertices"]) == 3 and set(data["edges_assignment"]) == {"M"}


def test_collinear_overlap_of_a_mountain_and_a_valley_is_refused(tmp_path):
    p = write(tmp_path, line(0, 0, 6, 0, extra='id="ridge"') + line(4, 0, 10, 0, "#0000ff"))
    with pytest.raises(ValueError, match=r'<line id="ridge">.*<line>\[1\].*as a mountain and a valley'):
        svg_to_fold(p)


def test_a_crease_drawn_over_a_facet_line_is_the_crease(tmp_path):
    p = write(tmp_path, line(0, 0, 10, 0, "#ffff00") + line(0, 0, 10, 0, "#0000ff") + line(0, 0, 10, 0, "#000000"))
    assert svg_to_fold(p, scale=1.0)["edges_assignment"] == ["B"]
    p = write(tmp_path, line(0, 0, 10, 0, "#ffff00") + line(0, 0, 10, 0, "#0000ff"))
    assert svg_to_fold(p, scale=1.0)["edges_assignment"] == ["V"]


def test_degree_four_vertex_edge_only_graph(tmp_path):
    # a square sheet, four creases from the centre to the sides' midpoints (left/right collinear mountains)
    body = (SQUARE + line(0, 5, 5, 5, "#ff0000") + line(5, 5, 10, 5, "#ff0000")
            + line(5, 5, 5, 0, "#ff0000") + line(5, 5, 5, 10, "#0000ff"))
    data = svg_to_fold(write(tmp_path, body), scale=1.0)
    assert len(data["vertices_coords"]) == 9  # 4 corners, 4 midpoints of the sides, the centre
    assert len(data["edges_vertices"]) == 12  # 8 border pieces, 4 creases
    assert sorted(data["edges_assignment"]) == ["B"] * 8 + ["M"] * 3 + ["V"]
    assert "faces_vertices" not in data


def test_unstroked_shapes_are_ignored(tmp_path):
    body = '<rect x="0" y="0" width="10" height="10" fill="#ff0000"/>' + line(0, 0, 10, 10, "#0000ff")
    data = svg_to_fold(write(tmp_path, body), scale=1.0)
    assert data["edges_assignment"] == ["V"]


def test_svg_text_is_accepted():
    data = svg_to_fold(svg(line(0, 0, 2, 0)))
    assert data["vertices_coords"] == [[0.0, 0.0], [1.0, 0.0]]


# --------------------------------------------------------------------------- errors


def test_bezier_path_is_refused_naming_its_id(tmp_path):
    p = write(tmp_path, '<path id="curvy" d="M0 0 L 5 0 C 6 1 7 1 8 0" stroke="#ff0000" fill="none"/>')
    with pytest.raises(ValueError, match=r'curvy.*Bezier') as e:
        svg_to_fold(p)
    assert str(e.value).startswith(str(p))


def test_rounded_rect_without_id_is_refused_naming_tag_and_index(tmp_path):
    body = SQUARE + '<rect x="1" y="1" width="5" height="5" rx="1" stroke="#000000" fill="none"/>'
    with pytest.raises(ValueError, match=r"<rect>\[1\].*arc"):
        svg_to_fold(write(tmp_path, body))


def test_unknown_colour_is_refused_naming_element_and_colour(tmp_path):
    p = write(tmp_path, line(0, 0, 10, 0, "#888888", 'id="pencil"'))
    with pytest.raises(ValueError, match=r'<line id="pencil">.*#888888.*#ff0000 mountain \(M\)'):
        svg_to_fold(p)


def test_missing_file():
    with pytest.raises(ValueError, match=r"^SVG file not found: /nonexistent/cp\.svg$"):
        svg_to_fold("/nonexistent/cp.svg")


def test_malformed_xml_is_a_one_line_error_naming_the_file(tmp_path):
    p = tmp_path / "broken.svg"
    p.write_text(f'<svg {NS}><line x1="0" y1="0" x2="1" y2="1" stroke="red"></svg>')
    with pytest.raises(ValueError, match="not valid XML") as e:
        svg_to_fold(p)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="^SVG text: not valid XML"):
        svg_to_fold("<svg><g></svg>")


def test_nothing_stroked_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no stroked"):
        svg_to_fold(write(tmp_path, '<rect width="10" height="10" fill="blue"/>'))


# --------------------------------------------------------------------------- loading


def test_load_svg_splits_keyword_arguments(tmp_path, monkeypatch):
    seen = {}

    def fake_load_fold(data, **kwargs):
        seen["data"], seen["kwargs"] = data, kwargs
        return "pattern"

    monkeypatch.setattr(fold_module, "load_fold", fake_load_fold)
    p = write(tmp_path, SQUARE + line(0, 0, 10, 10, "#0000ff", 'stroke-opacity="0.5"'))
    assert load_svg(p, scale=0.5, angles="opacity", density=2.0, stiffness=0.1) == "pattern"
    assert seen["kwargs"] == {"density": 2.0, "stiffness": 0.1}
    assert max(np.ptp(coords(seen["data"]), axis=0)) == pytest.approx(5.0)
    assert 90.0 in seen["data"]["edges_foldAngle"]


def test_square_with_diagonal_loads_as_two_panels(tmp_path):
    pattern = load_svg(write(tmp_path, SQUARE + line(0, 0, 10, 10, "#0000ff")))
    assert len(pattern.panels) == 2
    assert len(pattern.creases) == 1
