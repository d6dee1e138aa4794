# Rich display of agent-sandbox-server Python contexts (embedded in the binary).
#
# Loaded by the Python driver into its own module. Turns a value into a MIME
# bundle the way a notebook would: the _repr_*_ methods and
# _repr_mimebundle_, application/json for dicts and lists, e2b/data for
# pandas data frames, PNG plus an e2b/chart description for matplotlib
# figures. Provides display() and hooks IPython.display.display, PIL's
# Image.show/save and pyplot.show when those libraries are imported, without
# importing any of them itself. The driver sets _emit, _flush, _max_result
# and _charts_source before use.
import json
import math
import os
import sys

_emit = None
_flush = None
_max_result = 32 * 1024 * 1024
_charts_source = ""
_charts = {}
MAX_PIXELS = 1 << 26


class ResultTooLarge(Exception):
    """A displayed value is too large for one result."""


ResultTooLarge.__module__ = "builtins"  # tracebacks name it plainly


def _mib(size):
    return "%.1f MiB" % (size / 1048576.0)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _base64(value):
    import base64

    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value.strip() if isinstance(value, str) else None


def plain(value, depth=0):
    """The value as JSON data: numpy values as numbers, NaN as null, keys as strings."""
    if depth > 200:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return dict((k if isinstance(k, str) else str(k), plain(v, depth + 1)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and not isinstance(value, type):
        converted = tolist()
        if converted is not value:
            return plain(converted, depth + 1)
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat) and not isinstance(value, type):
        return None if value != value else isoformat()  # NaT is not equal to itself
    raise TypeError("%s is not JSON data" % type(value).__name__)


def _json(value):
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        pass
    try:
        return plain(value)
    except (TypeError, ValueError, RecursionError):
        return None


_REPRS = (
    ("_repr_html_", "text/html", _text),
    ("_repr_markdown_", "text/markdown", _text),
    ("_repr_svg_", "image/svg+xml", _text),
    ("_repr_png_", "image/png", _base64),
    ("_repr_jpeg_", "image/jpeg", _base64),
    ("_repr_pdf_", "application/pdf", _base64),
    ("_repr_latex_", "text/latex", _text),
    ("_repr_json_", "application/json", _json),
    ("_repr_javascript_", "application/javascript", _text),
)
_CONVERT = dict((mime, conv) for _, mime, conv in _REPRS)


def _call_repr(obj, name, *args):
    if isinstance(obj, type) or not callable(getattr(type(obj), name, None)):
        return None
    try:
        value = getattr(obj, name)(*args)
    except Exception:
        return None
    return value[0] if isinstance(value, tuple) and value else value


def _kind(obj):
    """'figure', 'frame' or None, from the class alone (nothing is imported)."""
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    if module.startswith("matplotlib.") and any(c.__name__ == "Figure" for c in cls.__mro__):
        return "figure"
    if (module == "pandas" or module.startswith("pandas.")) and cls.__name__ == "DataFrame":
        return "frame"
    return None


def _figure(fig, data):
    import base64
    import io

    width, height = fig.get_size_inches() * fig.dpi
    if width * height > MAX_PIXELS:
        raise ResultTooLarge(
            "the figure is %d x %d pixels, over the %d megapixel limit of a result; make it smaller"
            % (width, height, MAX_PIXELS >> 20)
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")
    chart = None
    try:
        chart = charts().figure_chart(fig)
    except Exception:
        chart = None
    if chart:
        data["e2b/chart"] = chart


class Raw(str):
    """JSON text that goes into an event as it is (encoded once, where it is made)."""


def _column(series):
    """A column's values as JSON text: numbers, ISO 8601 times, null for NaN and NaT."""
    kind = series.dtype.kind
    if kind in "iub":
        return json.dumps(series.tolist())
    if kind == "f":
        values = series.tolist()
        if series.isna().any():
            values = [None if v != v else v for v in values]
        return json.dumps(values, allow_nan=False)
    if kind == "M":
        return json.dumps([None if v != v else v.isoformat() for v in series.tolist()])
    return json.dumps(plain(series.tolist()), ensure_ascii=False, allow_nan=False)


def _frame_data(frame):
    if frame.size * 2 > _max_result:
        raise ResultTooLarge(
            "the data frame has %d cells, too many for the %s result limit; display a slice such as df.head(1000)"
            % (frame.size, _mib(_max_result))
        )
    fields = []
    for index, name in enumerate(frame.columns):
        key = name if isinstance(name, str) else str(name)
        fields.append("%s:%s" % (json.dumps(key, ensure_ascii=False), _column(frame.iloc[:, index])))
    return Raw("{%s}" % ",".join(fields))


def charts():
    """The chart extractor, compiled the first time a figure is displayed."""
    if "module" not in _charts:
        import types

        module = types.ModuleType("_abx_charts")
        exec(compile(_charts_source, "<abx-charts>", "exec"), module.__dict__)
        _charts["module"] = module
    return _charts["module"]


def _pretty(obj):
    text = repr(obj)
    if len(text) > 79 and type(obj) in (dict, list, tuple, set, frozenset):
        import pprint

        try:
            text = pprint.pformat(obj, width=79, sort_dicts=False)
        except Exception:
            pass
    return text


def bundle(obj, include=None, exclude=None):
    """The MIME bundle of obj."""
    data = {}
    kind = _kind(obj)
    if kind == "figure":
        _figure(obj, data)
    mimebundle = _call_repr(obj, "_repr_mimebundle_", include, exclude)
    if isinstance(mimebundle, dict):
        for mime, value in mimebundle.items():
            value = _CONVERT.get(mime, _json)(value)
            if isinstance(mime, str) and value is not None:
                data[mime] = value
    for name, mime, conv in _REPRS:
        if mime not in data:
            value = _call_repr(obj, name)
            value = conv(value) if value is not None else None
            if value is not None:
                data[mime] = value
    if "application/json" not in data and isinstance(obj, (dict, list)):
        value = _json(obj)
        if value is not None:
            data["application/json"] = value
    if kind == "frame":
        data["e2b/data"] = _frame_data(obj)
    if "text/plain" not in data and type(obj) is str:
        # Quoted as the protocol expects; the daemon removes exactly this pair of quotes.
        data["text/plain"] = "'%s'" % obj
    if "text/plain" not in data:
        try:
            data["text/plain"] = _pretty(obj)
        except Exception as e:
            data["text/plain"] = "<unrepresentable %s: %s>" % (type(obj).__name__, e)
    if include:
        data = dict((k, v) for k, v in data.items() if k in include)
    if exclude:
        data = dict((k, v) for k, v in data.items() if k not in exclude)
    return data


def _value(value):
    if isinstance(value, Raw):
        return value
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


def _encode(main, data):
    fields = ",".join("%s:%s" % (json.dumps(k, ensure_ascii=False), _value(v)) for k, v in data.items())
    text = '{"t":"result","main":%s,"data":{%s}}' % ("true" if main else "false", fields)
    return text.encode("utf-8", "replace")


def publish(obj, main=False, raw=False, include=None, exclude=None):
    """Sends obj as a result; raises ResultTooLarge when it cannot fit."""
    if raw:
        if not isinstance(obj, dict):
            raise TypeError("display(raw=True) takes a MIME bundle (a dict of MIME type to data)")
        data = dict((str(k), v if isinstance(v, str) else _json(v)) for k, v in obj.items())
    else:
        data = bundle(obj, include, exclude)
    encoded = _encode(main, data)
    if len(encoded) > _max_result and "e2b/chart" in data:
        del data["e2b/chart"]
        encoded = _encode(main, data)
    if len(encoded) > _max_result:
        sizes = sorted(((len(_value(v)), k) for k, v in data.items()), reverse=True)
        raise ResultTooLarge(
            "the result is %s (%s), over the %s result limit; save it to a file or display less"
            % (_mib(len(encoded)), ", ".join("%s %s" % (k, _mib(s)) for s, k in sizes[:2]), _mib(_max_result))
        )
    _flush()
    _emit(encoded)


class DisplayHandle(object):
    """What display(..., display_id=True) returns: display() and update() show the value again."""

    def __init__(self, display_id=None):
        self.display_id = display_id

    def display(self, obj, **kwargs):
        display(obj, **kwargs)

    def update(self, obj, **kwargs):
        display(obj, **kwargs)


def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False, clear=False, **kwargs):
    """Shows each object as a result of the running execution (IPython's display())."""
    for obj in objs:
        publish(obj, raw=raw, include=include, exclude=exclude)
    if display_id:
        return DisplayHandle(None if display_id is True else display_id)
    return None


def flush_figures():
    """Shows the figures pyplot still holds, then closes them (as a notebook does after a cell)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        from matplotlib._pylab_helpers import Gcf

        for manager in Gcf.get_all_fig_managers():
            publish(manager.canvas.figure)
    finally:
        plt.close("all")


def _show(*args, **kwargs):
    flush_figures()


def _hook_matplotlib(module):
    if not os.environ.get("MPLBACKEND"):
        module.use("agg")


def _hook_pyplot(module):
    module.show = _show


def _hook_ipython_display(module):
    module.display = display
    if hasattr(module, "clear_output"):
        module.clear_output = lambda wait=False: None


def _hook_pil(module):
    image = getattr(module, "Image", None)
    if image is None or getattr(image, "_abx_hooked", False):
        return
    original_save = image.save

    def show(self, title=None, **options):
        display(self)

    def save(self, fp, format=None, **params):
        if isinstance(fp, (str, os.PathLike)):
            display(self)
        return original_save(self, fp, format, **params)

    image.show = show
    image.save = save
    image._abx_hooked = True


HOOKS = {
    "matplotlib": _hook_matplotlib,
    "matplotlib.pyplot": _hook_pyplot,
    "IPython.core.display_functions": _hook_ipython_display,
    "IPython.core.display": _hook_ipython_display,
    "IPython.display": _hook_ipython_display,
    "PIL.Image": _hook_pil,
}


class ImportHook(object):
    """Runs a hook of HOOKS right after its module is first imported."""

    def find_spec(self, name, path=None, target=None):
        hook = HOOKS.get(name)
        if hook is None:
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
            hook(module)

        spec.loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


def install():
    """Hooks the libraries (now for those already imported, else when they are)."""
    sys.meta_path.insert(0, ImportHook())
    for name, hook in HOOKS.items():
        if name in sys.modules:
            hook(sys.modules[name])
