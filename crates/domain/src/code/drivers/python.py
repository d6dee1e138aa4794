# Python driver of agent-sandbox-server code contexts (embedded in the binary).
#
# Runs cells for one context in a persistent namespace. Commands arrive on
# fd 3 as NUL-separated fields ("exec", seq, n, n name/value pairs, code);
# events leave on fd 4 as JSON objects each followed by a NUL byte. Output of
# sys.stdout/sys.stderr becomes "out" events (in order with results and
# errors); output written to fds 1 and 2 directly (subprocesses, C code)
# reaches the daemon through those pipes. SIGINT interrupts the running cell
# (KeyboardInterrupt) and is ignored between cells.
#
# Arguments: the result size limit in bytes, then the sources of the display
# module (python_display.py) and of the chart extractor (python_charts.py).
# Cells are read as IPython reads them: a common indentation is removed,
# `!cmd` lines run shell commands and `%cd`, `%env`, `%pip` work.
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
    max_result, display_source, charts_source = int(sys.argv[1]), sys.argv[2], sys.argv[3]
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
        write_encoded(json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8", "replace"))

    def write_encoded(data):
        data += b"\0"
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

    rich = types.ModuleType("_abx_display")
    exec(compile(display_source, "<abx-display>", "exec"), rich.__dict__)
    rich._emit = write_encoded
    rich._flush = flush_output
    rich._max_result = max_result
    rich._charts_source = charts_source
    rich.install()
    publish = rich.publish
    flush_figures = rich.flush_figures

    user = types.ModuleType("__main__")
    user.__dict__["__builtins__"] = builtins
    user.__dict__["display"] = rich.display
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

    def shell(command):
        """Runs a shell command on this process's descriptors 1 and 2 (`!cmd`)."""
        import subprocess

        flush_output()
        status = subprocess.call(command, shell=True, stdin=subprocess.DEVNULL, executable=os.environ.get("SHELL") or "/bin/sh")
        namespace["_exit_code"] = status
        return status

    def getoutput(command):
        """The output lines of a shell command (`x = !cmd`)."""
        import subprocess

        done = subprocess.run(command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, executable=os.environ.get("SHELL") or "/bin/sh")
        namespace["_exit_code"] = done.returncode
        return done.stdout.decode("utf-8", "replace").splitlines()

    def line_magic(line):
        name, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        if name == "cd":
            os.chdir(os.path.expanduser(arg or "~"))
            print(os.getcwd())
        elif name == "pip":
            import shlex

            shell("%s -m pip %s" % (shlex.quote(sys.executable), arg))
        elif name == "env":
            key, sep, value = arg.replace("=", " ", 1).partition(" ") if arg else ("", "", "")
            if not key:
                return dict(os.environ)
            if not sep:
                return os.environ.get(key)
            os.environ[key] = value.strip()
        elif name != "matplotlib":
            raise NameError("magic %%%s is not supported here (supported: %%cd, %%env, %%pip, %%matplotlib, !cmd)" % name)
        return None

    def cell_magic(name, arg, body):
        if name in ("bash", "sh"):
            import shlex

            return shell("%s -c %s" % (name, shlex.quote(body)))
        if name == "writefile":
            append = arg.startswith("-a ")
            path = os.path.expanduser(arg[3:].strip() if append else arg.strip())
            with open(path, "a" if append else "w") as target:
                target.write(body)
            print("%s %s" % ("Appending to" if append else "Writing", path))
            return None
        raise NameError("cell magic %%%%%s is not supported here (supported: %%%%bash, %%%%sh, %%%%writefile)" % name)

    def magic(kind, text):
        if kind == "!":
            shell(text)  # as in IPython, `!cmd` has no value
            return None
        return getoutput(text) if kind == "=!" else line_magic(text)

    builtins.__abx_magic__ = magic
    builtins.__abx_cell_magic__ = cell_magic

    def prepare(code, filename):
        """The cell as Python: common indentation removed, shell escapes and magics rewritten."""
        first = next((line for line in code.splitlines() if line.strip()), "")
        if first[:1] in (" ", "\t"):
            import textwrap

            code = textwrap.dedent(code)
        if code.lstrip().startswith("%%"):
            head, _, body = code.lstrip().partition("\n")
            name, _, arg = head[2:].partition(" ")
            code = "__abx_cell_magic__(%r, %r, %r)" % (name.strip(), arg.strip(), body)
        try:
            return code, ast.parse(code, filename, "exec")
        except SyntaxError as error:
            original = error
        if "!" not in code and "%" not in code:
            raise original.with_traceback(None)
        import re

        escape = re.compile(r"^(\s*)(?:([A-Za-z_][\w.]*)\s*=\s*)?(!|%)(?!=)(.*)$")

        def rewrite(line):
            match = escape.match(line)
            if not match:
                return line
            indent, target, kind, text = match.groups()
            kind = "=!" if target and kind == "!" else kind
            call = "__abx_magic__(%r, %r)" % (kind, text)
            return "%s%s = %s" % (indent, target, call) if target else indent + call

        rewritten = "\n".join(rewrite(line) for line in code.split("\n"))
        try:
            return rewritten, ast.parse(rewritten, filename, "exec")
        except SyntaxError:
            raise original.with_traceback(None)

    def run_cell(number, code):
        filename = "<cell %d>" % number
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        cells.append(filename)
        if len(cells) > 1000:
            linecache.cache.pop(cells.pop(0), None)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        code, tree = prepare(code, filename)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
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
        frames = [f for f in summary.stack if f.filename != driver_file and not f.filename.startswith("<abx-")]
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
