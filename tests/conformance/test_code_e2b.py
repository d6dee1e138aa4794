"""Code contexts through the real ``e2b-code-interpreter`` SDK (debug mode).

Every result format of the SDK's ``Result``, the chart schema of its
``charts`` module, each language, and the code-interpreter server's wire
details, against our code port. The SDK's port constant is pointed at the
ephemeral port of the server under test. Python contexts run this venv's
interpreter (numpy, pandas, matplotlib, Pillow and IPython are pinned in
requirements.txt); R, Java and TypeScript need what ``scripts/test`` installs.
"""

from __future__ import annotations

import base64
import json
import sys

import httpx
import pytest
from e2b import NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter import code_interpreter_sync as e2b_sync
from e2b_code_interpreter.charts import (
    BarChart,
    BoxAndWhiskerChart,
    Chart,
    ChartType,
    LineChart,
    PieChart,
    ScatterChart,
    SuperChart,
)

from test_code import code_port


@pytest.fixture
def server(make_server):
    return make_server(token=None, args=("--code-python", sys.executable))


@pytest.fixture
def sandbox(server, monkeypatch):
    monkeypatch.setattr(e2b_sync, "JUPYTER_PORT", code_port(server))
    return Sandbox.create(debug=True)


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def test_display_calls_come_before_the_main_result(sandbox):
    execution = sandbox.run_code("display('shown')\ndisplay({'k': [1, 2.5, None]})\n[1, 2]")
    shown, data, main = execution.results
    assert (shown.text, shown.is_main_result) == ("shown", False)
    assert (data.json, data.text, data.is_main_result) == ({"k": [1, 2.5, None]}, "{'k': [1, 2.5, None]}", False)
    assert (main.json, main.is_main_result, execution.text) == ([1, 2], True, "[1, 2]")


def test_every_result_format_is_produced(sandbox):
    code = """
    class Everything:
        def _repr_html_(self): return '<b>h</b>'
        def _repr_markdown_(self): return '**m**'
        def _repr_svg_(self): return '<svg></svg>'
        def _repr_png_(self): return b'\\x89PNG'
        def _repr_jpeg_(self): return b'\\xff\\xd8'
        def _repr_pdf_(self): return b'%PDF'
        def _repr_latex_(self): return r'$x^2$'
        def _repr_json_(self): return {'n': 1}
        def _repr_javascript_(self): return 'console.log(1)'
        def _repr_mimebundle_(self, include=None, exclude=None): return {'application/x-custom': 'c'}
        def __repr__(self): return 'Everything()'
    Everything()
    """
    result = sandbox.run_code(code).results[0]
    assert result.formats() == [
        "text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "application/x-custom"
    ]
    assert (result.text, result.html, result.markdown, result.svg) == ("Everything()", "<b>h</b>", "**m**", "<svg></svg>")
    assert [base64.b64decode(v) for v in (result.png, result.jpeg, result.pdf)] == [b"\x89PNG", b"\xff\xd8", b"%PDF"]
    assert (result.latex, result.json, result.javascript) == ("$x^2$", {"n": 1}, "console.log(1)")
    assert result.extra == {"application/x-custom": "c"}


def test_ipython_display_raw_bundles_and_display_objects(sandbox):
    code = (
        "from IPython.display import display, HTML, Markdown\n"
        "display({'text/latex': r'\\text{raw}'}, raw=True)\n"
        "display(HTML('<i>x</i>'), Markdown('# t'))"
    )
    raw, html, markdown = sandbox.run_code(code).results
    assert (raw.formats(), raw.latex) == (["latex"], r"\text{raw}")
    assert (html.html, markdown.markdown) == ("<i>x</i>", "# t")


def test_a_data_frame_gives_html_and_its_columns(sandbox):
    code = """
    import pandas as pd
    pd.DataFrame({"n": [1, 2, 3], "f": [0.5, float("nan"), 2.0], "t": pd.to_datetime(["2024-01-02", None, "2024-03-04"])})
    """
    result = sandbox.run_code(code).results[0]
    assert result.data == {"n": [1, 2, 3], "f": [0.5, None, 2.0], "t": ["2024-01-02T00:00:00", None, "2024-03-04T00:00:00"]}
    assert "<table" in result.html and "NaN" in result.text


def test_strings_and_env_vars_arrive_verbatim(sandbox):
    value = "it's \"q\" \\ $(no)\n"
    execution = sandbox.run_code("import os\nos.environ['V']", envs={"V": value})
    assert execution.text == value
    assert sandbox.run_code("import os\nos.environ.get('V', 'gone')").text == "gone"
    assert sandbox.run_code("process.env.V", language="javascript", envs={"V": value}).text == value


def test_figures_give_a_png_and_their_chart(sandbox):
    line = """
    import datetime
    import matplotlib.pyplot as plt
    days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(5)]
    plt.plot(days, [1, 4, 9, 16, 25], label='squares')
    plt.plot(days, [2, 3, 4, 5, 6])
    plt.xlabel('Day (d)'); plt.ylabel('Value [m]'); plt.title('Growth')
    plt.show()
    """
    result = sandbox.run_code(line).results[0]
    assert png_size(result.png)[0] > 100 and result.text.startswith("<Figure size")
    chart = result.chart
    assert isinstance(chart, LineChart) and chart.title == "Growth"
    assert (chart.x_label, chart.x_unit, chart.y_unit, chart.x_scale, chart.y_scale) == ("Day (d)", "d", "m", "datetime", "linear")
    assert [e.label for e in chart.elements] == ["squares", "Line 1"]
    assert chart.elements[0].points[0] == ("2024-01-01", 1.0) and len(chart.elements[0].points) == 5
    assert all(isinstance(t, str) for t in chart.x_ticks) and all(isinstance(t, float) for t in chart.y_ticks)

    scatter = sandbox.run_code("import matplotlib.pyplot as plt\nplt.scatter([1, 2], [3, 4], label='pts')\nplt.yscale('log')\nplt.show()")
    chart = scatter.results[0].chart
    assert isinstance(chart, ScatterChart) and chart.y_scale == "log"
    assert (chart.elements[0].label, chart.elements[0].points) == ("pts", [(1.0, 3.0), (2.0, 4.0)])

    bars = sandbox.run_code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5], label='sold')\nplt.show()")
    chart = bars.results[0].chart
    assert isinstance(chart, BarChart) and chart.type == ChartType.BAR
    assert [(b.label, b.value, b.group) for b in chart.elements] == [("a", 3, "sold"), ("b", 5, "sold")]

    pie = sandbox.run_code("import matplotlib.pyplot as plt\nplt.pie([3, 1], labels=['yes', 'no'])\nplt.show()")
    chart = pie.results[0].chart
    assert isinstance(chart, PieChart)
    assert [(w.label, w.angle, w.radius) for w in chart.elements] == [("yes", 270, 1), ("no", 90, 1)]


def test_box_plots_super_charts_and_unsupported_plots(sandbox):
    box = """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.boxplot([[85, 90, 78, 92, 88], [95, 89, 76, 91, 84, 87]], tick_labels=['A', 'B'], patch_artist=True)
    ax.set_xlabel('Class'); ax.set_ylabel('Score')
    plt.show()
    """
    chart = sandbox.run_code(box).results[0].chart
    assert isinstance(chart, BoxAndWhiskerChart) and (chart.x_label, chart.y_label) == ("Class", "Score")
    stats = [(b.label, b.min, b.first_quartile, b.median, b.third_quartile, b.max, b.outliers) for b in chart.elements]
    assert stats == [("A", 78, 85, 88, 90, 92, []), ("B", 84, 84.75, 88, 90.5, 95, [76])]

    two = "import matplotlib.pyplot as plt\nfig, (a, b) = plt.subplots(1, 2)\nfig.suptitle('Both')\na.plot([1, 2])\nb.scatter([1], [2])\nplt.show()"
    chart = sandbox.run_code(two).results[0].chart
    assert isinstance(chart, SuperChart) and chart.title == "Both"
    assert [type(c) for c in chart.elements] == [LineChart, ScatterChart]

    image = "import matplotlib.pyplot as plt\nplt.imshow([[1, 2], [3, 4]])\nplt.title('img')\nplt.show()"
    result = sandbox.run_code(image).results[0]
    assert result.png and type(result.chart) is Chart
    assert (result.chart.type, result.chart.title, result.chart.elements) == (ChartType.UNKNOWN, "img", [])
    assert sandbox.run_code("import matplotlib.pyplot as plt\nplt.figure()\nplt.show()").results[0].chart is None


def test_pil_images_are_shown_saved_and_returned(server, sandbox):
    code = f"""
    from PIL import Image
    image = Image.new('RGB', (7, 5), 'red')
    image.show()
    image.save({str(server.base / 'red.png')!r})
    image
    """
    results = sandbox.run_code(code).results
    assert [png_size(r.png) for r in results] == [(7, 5)] * 3
    assert [r.is_main_result for r in results] == [False, False, True]
    assert (server.base / "red.png").is_file()


def test_cells_are_read_as_ipython_reads_them(server, sandbox):
    execution = sandbox.run_code("\n    x = 2\n    if x:\n        print('indented')\n    x * 21\n")
    assert (execution.logs.stdout, execution.text) == (["indented\n"], "42")
    (server.base / "sub").mkdir()
    execution = sandbox.run_code("!echo from-shell\nnames = !ls\nprint(names)\n%cd sub\nimport os\nos.getcwd()")
    assert execution.logs.stdout == ["from-shell\n", "['sub']\n", f"{server.base / 'sub'}\n"]
    assert execution.text == str(server.base / "sub")
    assert sandbox.run_code("%%bash\necho $((6 * 7))").logs.stdout == ["42\n"]
    error = sandbox.run_code("%nosuchmagic").error
    assert error.name == "NameError" and "not supported here" in error.value


def test_too_large_results_are_clear_errors(sandbox):
    error = sandbox.run_code("import matplotlib.pyplot as plt\nplt.figure(figsize=(300, 300))\nplt.plot([1, 2])\nplt.show()").error
    assert error.name == "ResultTooLarge" and "megapixel limit" in error.value
    error = sandbox.run_code("import numpy as np, pandas as pd\ndisplay(pd.DataFrame(np.zeros((3_000_000, 6))))").error
    assert error.name == "ResultTooLarge" and "df.head(1000)" in error.value
    assert sandbox.run_code("'still fine'").text == "still fine"


def test_memory_stays_bounded_over_a_thousand_figures(sandbox):
    rss = "int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])"
    figure = "    fig, ax = plt.subplots(figsize=(0.5, 0.5), dpi=10)\n    ax.set_axis_off()\n    ax.plot([0, i])\n"
    loop = "import matplotlib.pyplot as plt\nfor i in range(N):\n" + figure + "    plt.show()\n" + rss
    warm = int(sandbox.run_code(loop.replace("N", "50")).text)
    execution = sandbox.run_code(loop.replace("N", "1000"), timeout=300)
    assert len(execution.results) == 1001 and execution.results[-1].is_main_result
    assert int(execution.text) - warm < 40_000, f"RSS grew from {warm} to {execution.text} KiB"


def test_javascript_imports_await_and_redeclarations(sandbox):
    code = "\n    import { readFileSync } from 'fs'\n    import * as os from 'node:os'\n    const n = await Promise.resolve(40)\n    typeof readFileSync + typeof os.cpus + (n + 2)\n"
    assert sandbox.run_code(code, language="js").text == "functionfunction42"
    assert sandbox.run_code("const n = 1; class K {}\nn + 1", language="js").text == "2"
    assert sandbox.run_code("n", language="javascript").text == "1"


def test_typescript_r_and_java_keep_state(sandbox):
    sandbox.run_code("interface P { x: number }\nconst p: P = { x: 20 }", language="ts")
    assert sandbox.run_code("p.x + 1 as number", language="typescript").text == "21"
    assert sandbox.run_code('cat("hi\\n")\nv <- c(1, 2)', language="r").logs.stdout == ["hi\n"]
    execution = sandbox.run_code("Sys.getenv('E')\nsum(v)", language="r", envs={"E": "e"})
    assert [r.text for r in execution.results] == ['[1] "e"', "[1] 3"]
    assert sandbox.run_code("stop('boom')", language="r").error.value == "boom"
    sandbox.run_code("int base = 40;", language="java")
    assert sandbox.run_code('System.getProperty("P")', language="java", envs={"P": "it's"}).text == "it's"
    assert sandbox.run_code("base + 2", language="java").text == "42"
    assert sandbox.run_code('Integer.parseInt("x")', language="java").error.name == "NumberFormatException"


def test_a_missing_interpreter_is_named(make_server, monkeypatch):
    srv = make_server(token=None, args=("--code-r", "/nonexistent/Rscript"))
    monkeypatch.setattr(e2b_sync, "JUPYTER_PORT", code_port(srv))
    sandbox = Sandbox.create(debug=True)
    with pytest.raises(SandboxException, match="501 Not Implemented: r is not available here: its interpreter '/nonexistent/Rscript'"):
        sandbox.run_code("1", language="r")


def test_wire_details_are_the_code_interpreter_servers(server, sandbox):
    url = server.listeners["code"]
    fresh = httpx.get(f"{url}/contexts").json()
    assert [(c["language"], c["cwd"]) for c in fresh] == [("python", str(server.base)), ("javascript", str(server.base))]
    created = sandbox.create_code_context(language="bash")
    assert [c.id for c in sandbox.list_code_contexts()] == [fresh[0]["id"], fresh[1]["id"], created.id]
    restarted = httpx.post(f"{url}/contexts/{created.id}/restart")
    assert (restarted.status_code, restarted.json()) == (200, None)
    removed = httpx.delete(f"{url}/contexts/{created.id}")
    assert (removed.status_code, removed.json()) == (200, None)
    missing = httpx.post(f"{url}/execute", json={"language": "python"})
    assert missing.status_code == 422
    assert missing.json()["detail"][0] | {"input": None} == {"type": "missing", "loc": ["body", "code"], "msg": "Field required", "input": None}
    wrong = httpx.post(f"{url}/contexts", content=b"{not json")
    assert (wrong.status_code, wrong.json()["detail"][0]["type"]) == (422, "json_invalid")
    with pytest.raises(NotFoundException, match=f"Context {created.id} not found"):
        sandbox.restart_code_context(created.id)
    lines = [json.loads(line) for line in httpx.post(f"{url}/execute", json={"code": "1"}).text.splitlines()]
    assert [line["type"] for line in lines] == ["number_of_executions", "result", "end_of_execution"]


def test_a_detached_execution_reads_with_the_sdks_parser_and_reattaches(server, sandbox):
    """This server's extension (issue 32): ``X-Abx-Detach: keep`` keeps an
    execution running without its connection. The SDK never sends it, so
    its own executions are unchanged (and carry no id); a detached answer
    is the protocol's lines plus an ``execution`` line, which the SDK's own
    parser ignores, and ``GET /executions/{id}`` after a cursor gives the rest."""
    from e2b_code_interpreter.models import Execution, parse_output

    url = server.listeners["code"]
    code = "import time\nfor i in range(400):\n    print(f'n{i}')\n    if i == 200:\n        time.sleep(0.5)\n'done'"
    plain = sandbox.run_code(code)
    assert (plain.text, plain.error, "".join(plain.logs.stdout)) == ("done", None, "".join(f"n{i}\n" for i in range(400)))
    with httpx.stream("POST", f"{url}/execute", json={"code": code}) as response:
        assert "x-abx-execution-id" not in response.headers
        assert json.loads(next(response.iter_lines()))["type"] == "number_of_executions"

    execution = Execution()
    lines = bytes_ = 0
    with httpx.stream("POST", f"{url}/execute", json={"code": code}, headers={"X-Abx-Detach": "keep"}) as response:
        execution_id = response.headers["x-abx-execution-id"]
        for line in response.iter_lines():
            parse_output(execution, line)
            kind = json.loads(line)["type"]
            if kind == "execution":
                assert json.loads(line) == {"type": "execution", "execution_id": execution_id}
            elif kind != "keepalive":
                lines, bytes_ = lines + 1, bytes_ + len(line.encode()) + 1
            if "n100\n" in execution.logs.stdout:
                break  # leave mid-execution
    assert execution.text is None, "left before the end"
    cursor = f"{execution_id}:{lines}:{bytes_}"
    with httpx.stream("GET", f"{url}/executions/{execution_id}", headers={"Last-Event-ID": cursor}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            parse_output(execution, line)
    assert (execution.text, execution.error) == ("done", None)
    assert "".join(execution.logs.stdout) == "".join(plain.logs.stdout), "every line once, across the two connections"
    assert execution.execution_count == plain.execution_count + 2
