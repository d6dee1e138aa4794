# Python driver of agent-sandbox-server code contexts (embedded in the binary).
#
# Runs cells for one context in a persistent namespace. Commands arrive on
# fd 3 as NUL-separated fields ("exec", seq, n, n name/value pairs, code);
# events leave on fd 4 as JSON objects each followed by a NUL byte. Output of
# sys.stdout/sys.stderr becomes "out" events (in order with results and
# errors); output written to fds 1 and 2 directly (subprocesses, C code)
# reaches the daemon through those pipes. SIGINT interrupts the running cell
# (KeyboardInterrupt) and is ignored between cells.
import os
import sys


def main():
    import ast
    import builtins
    import io
    import json
    import linecache
    import signal
    import threading
    import traceback
    import types

    ctl_fd, evt_fd = 3, 4
    os.set_inheritable(ctl_fd, False)
    os.set_inheritable(evt_fd, False)
    driver_file = sys._getframe().f_code.co_filename
    main_thread = threading.get_ident()
    lock = threading.RLock()
    state = {"executing": False, "writing": 0, "pending": False}
    max_frame = 60 * 1024 * 1024
    max_text = 32 * 1024
    cells = []

    def on_sigint(signum, frame):
        if not state["executing"]:
            return
        if state["writing"]:
            state["pending"] = True
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    def write_frame(obj):
        data = json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8", "replace") + b"\0"
        is_main = threading.get_ident() == main_thread
        with lock:
            if is_main:
                state["writing"] += 1
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(evt_fd, view):]
            finally:
                if is_main:
                    state["writing"] -= 1
        if is_main and state["pending"] and not state["writing"]:
            state["pending"] = False
            if state["executing"]:
                raise KeyboardInterrupt

    pending = {"stream": None, "parts": [], "size": 0}

    def flush_output():
        with lock:
            if not pending["parts"]:
                return
            text = "".join(pending["parts"])
            stream = pending["stream"]
            pending["parts"] = []
            pending["size"] = 0
            for start in range(0, len(text), max_text):
                write_frame({"t": "out", "s": stream, "text": text[start:start + max_text]})

    def write_output(stream, text):
        with lock:
            if pending["stream"] != stream:
                flush_output()
                pending["stream"] = stream
            pending["parts"].append(text)
            pending["size"] += len(text)
            if "\n" in text or pending["size"] >= max_text:
                flush_output()

    class Bytes(object):
        def __init__(self, stream):
            self._stream = stream

        def write(self, data):
            self._stream.write(bytes(data).decode("utf-8", "replace"))
            return len(data)

        def flush(self):
            self._stream.flush()

    class Output(io.TextIOBase):
        encoding = "utf-8"
        errors = "strict"
        line_buffering = True

        def __init__(self, name, fd):
            self.name = "<%s>" % name
            self._stream = name
            self._fd = fd
            self.buffer = Bytes(self)

        def write(self, text):
            if not isinstance(text, str):
                raise TypeError("write() argument must be str, not %s" % type(text).__name__)
            if text:
                write_output(self._stream, text)
            return len(text)

        def flush(self):
            flush_output()

        def fileno(self):
            return self._fd

        def isatty(self):
            return False

        def writable(self):
            return True

    sys.stdout = Output("stdout", 1)
    sys.stderr = Output("stderr", 2)
    sys.argv = [""]

    def as_text(value):
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value if isinstance(value, str) else None

    def as_base64(value):
        import base64

        if isinstance(value, (bytes, bytearray)):
            return base64.b64encode(bytes(value)).decode("ascii")
        return value.strip() if isinstance(value, str) else None

    def as_json(value):
        try:
            json.dumps(value)
        except Exception:
            return None
        return value

    reprs = (
        ("_repr_html_", "text/html", as_text),
        ("_repr_markdown_", "text/markdown", as_text),
        ("_repr_svg_", "image/svg+xml", as_text),
        ("_repr_png_", "image/png", as_base64),
        ("_repr_jpeg_", "image/jpeg", as_base64),
        ("_repr_pdf_", "application/pdf", as_base64),
        ("_repr_latex_", "text/latex", as_text),
        ("_repr_json_", "application/json", as_json),
        ("_repr_javascript_", "application/javascript", as_text),
    )
    converters = dict((mime, conv) for _, mime, conv in reprs)

    def call_repr(obj, name, *args):
        if isinstance(obj, type) or not callable(getattr(type(obj), name, None)):
            return None
        try:
            value = getattr(obj, name)(*args)
        except Exception:
            return None
        return value[0] if isinstance(value, tuple) and value else value

    def figure_png(fig):
        import base64

        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")

    def is_figure(obj):
        return type(obj).__module__.startswith("matplotlib.") and type(obj).__name__ == "Figure"

    def bundle(obj):
        data = {}
        if is_figure(obj):
            try:
                data["image/png"] = figure_png(obj)
            except Exception:
                pass
        mimebundle = call_repr(obj, "_repr_mimebundle_", None, None)
        if isinstance(mimebundle, dict):
            for mime, value in mimebundle.items():
                value = converters.get(mime, as_json)(value)
                if isinstance(mime, str) and value is not None:
                    data[mime] = value
        for name, mime, conv in reprs:
            if mime not in data:
                value = call_repr(obj, name)
                value = conv(value) if value is not None else None
                if value is not None:
                    data[mime] = value
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)
            except Exception as e:
                data["text/plain"] = "<unrepresentable %s: %s>" % (type(obj).__name__, e)
        return data

    def publish(obj, main=False):
        data = bundle(obj)
        frame = {"t": "result", "main": main, "data": data}
        if sum(len(v) for v in data.values() if isinstance(v, str)) > max_frame:
            frame["data"] = {"text/plain": data.get("text/plain", "")[:max_text]}
            write_output("stderr", "the result was too large to send; only its text is shown\n")
        flush_output()
        write_frame(frame)

    def display(*objs):
        for obj in objs:
            publish(obj)

    def flush_figures():
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf

            for manager in Gcf.get_all_fig_managers():
                publish(manager.canvas.figure)
        finally:
            plt.close("all")

    def show(*args, **kwargs):
        flush_figures()

    class MatplotlibHook(object):
        """Makes matplotlib render off-screen and send figures as PNG results."""

        def find_spec(self, name, path=None, target=None):
            if name not in ("matplotlib", "matplotlib.pyplot"):
                return None
            spec = None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(name, path, target)
                    if spec is not None:
                        break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            original = spec.loader.exec_module

            def exec_module(module):
                original(module)
                if name == "matplotlib" and not os.environ.get("MPLBACKEND"):
                    module.use("agg")
                elif name == "matplotlib.pyplot":
                    module.show = show

            spec.loader.exec_module = exec_module
            return spec

        def invalidate_caches(self):
            pass

    sys.meta_path.insert(0, MatplotlibHook())

    user = types.ModuleType("__main__")
    user.__dict__["__builtins__"] = builtins
    user.__dict__["display"] = display
    sys.modules["__main__"] = user
    namespace = user.__dict__
    loop = {}

    def run_code(code):
        value = eval(code, namespace)
        if code.co_flags & 0x80:  # CO_COROUTINE: the cell awaits at top level
            if "loop" not in loop:
                import asyncio

                loop["loop"] = asyncio.new_event_loop()
                asyncio.set_event_loop(loop["loop"])
            value = loop["loop"].run_until_complete(value)
        return value

    def silenced(code, node):
        try:
            lines = code.splitlines()
            tail = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:].decode("utf-8", "replace")
            rest = "\n".join([tail] + lines[node.end_lineno:])
        except Exception:
            return False
        return rest.lstrip().startswith(";")

    def run_cell(number, code):
        filename = "<cell %d>" % number
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        cells.append(filename)
        if len(cells) > 1000:
            linecache.cache.pop(cells.pop(0), None)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        try:
            tree = ast.parse(code, filename, "exec")
        except SyntaxError as error:
            raise error.with_traceback(None)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not silenced(code, tree.body[-1]):
            last = tree.body.pop()
        if tree.body:
            run_code(compile(tree, filename, "exec", flags, True))
        if last is not None:
            value = run_code(compile(ast.Expression(last.value), filename, "eval", flags, True))
            if value is not None:
                namespace["_"] = value
                publish(value, main=True)

    def report(error):
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == driver_file:
            tb = tb.tb_next
        summary = traceback.TracebackException(type(error), error, tb)
        frames = [f for f in summary.stack if f.filename != driver_file]
        summary.stack = traceback.StackSummary.from_list(frames)
        text = "".join(summary.format())
        try:
            value = str(error)
        except Exception:
            value = ""
        write_frame({"t": "error", "name": type(error).__name__, "value": value, "traceback": text})

    def execute(seq, env, code):
        state["pending"] = False
        saved = [(name, os.environ.get(name)) for name, _ in env]
        try:
            for name, value in env:
                os.environ[name] = value
            try:
                state["executing"] = True
                run_cell(seq, code)
            finally:
                state["executing"] = False
        except BaseException as error:
            state["executing"] = False
            flush_output()
            report(error)
        finally:
            state["executing"] = False
            try:
                flush_figures()
            except BaseException as error:
                report(error)
            for name, old in saved:
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old
            flush_output()
            write_frame({"t": "done", "seq": seq})

    buffered = [b""]

    def field():
        while b"\0" not in buffered[0]:
            chunk = os.read(ctl_fd, 65536)
            if not chunk:
                return None
            buffered[0] += chunk
        head, _, buffered[0] = buffered[0].partition(b"\0")
        return head.decode("utf-8", "surrogateescape")

    write_frame({"t": "ready", "version": sys.version.split()[0]})
    while True:
        command = field()
        if command is None:
            os._exit(0)
        if command != "exec":
            continue
        seq = int(field() or 0)
        env = []
        for _ in range(int(field() or 0)):
            name, value = field(), field()
            env.append((name, value))
        code = field()
        if code is None:
            os._exit(0)
        execute(seq, env, code)


main()
