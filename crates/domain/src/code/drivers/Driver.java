// Java driver of agent-sandbox-server code contexts (embedded in the binary,
// written to a private file and run by the JDK's source launcher).
//
// Hosts a JShell whose snippets run in this JVM, so declarations persist from
// one cell to the next. Commands arrive on fd 3 as NUL-separated fields
// ("exec", seq, n, n name/value pairs, code); events leave on fd 4 as JSON
// objects each followed by a NUL byte. System.out and System.err go to fds 1
// and 2 (flushed before each event, so output arrives in order). A cell's
// variables are set as system properties for its duration (Java cannot
// change its own environment). The value of a final expression is the main
// result. SIGINT stops the running snippet.

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.VarSnippet;

public class Driver {
    private static final String IMPORTS = "import java.io.*; import java.math.*; import java.net.*; import java.nio.file.*;"
            + " import java.util.*; import java.util.concurrent.*; import java.util.function.*; import java.util.regex.*;"
            + " import java.util.stream.*;";

    private final InputStream control;
    private final OutputStream events;
    private final JShell shell;

    private Driver(InputStream control, OutputStream events, JShell shell) {
        this.control = control;
        this.events = events;
        this.shell = shell;
    }

    public static void main(String[] args) throws Exception {
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8"));
        System.setErr(new PrintStream(new FileOutputStream(FileDescriptor.err), true, "UTF-8"));
        InputStream control = new BufferedInputStream(new FileInputStream("/dev/fd/3"));
        OutputStream events = new FileOutputStream("/dev/fd/4");
        JShell shell = JShell.builder().executionEngine("local").out(System.out).err(System.err).build();
        for (String source : IMPORTS.split("(?<=;)")) {
            shell.eval(source.trim());
        }
        Driver driver = new Driver(control, events, shell);
        driver.onInterrupt();
        driver.emit("{\"t\":\"ready\",\"version\":" + json(System.getProperty("java.version")) + "}");
        driver.loop();
    }

    /** SIGINT stops the running snippet (sun.misc.Signal, looked up so nothing warns at compile time). */
    private void onInterrupt() {
        try {
            Class<?> signal = Class.forName("sun.misc.Signal");
            Class<?> handler = Class.forName("sun.misc.SignalHandler");
            Object proxy = Proxy.newProxyInstance(handler.getClassLoader(), new Class<?>[] {handler}, (p, method, a) -> {
                if (method.getName().equals("handle")) {
                    shell.stop();
                }
                return null;
            });
            signal.getMethod("handle", signal, handler).invoke(null, signal.getConstructor(String.class).newInstance("INT"), proxy);
        } catch (ReflectiveOperationException | RuntimeException e) {
            System.err.println("interrupts are not available: " + e);
        }
    }

    private void loop() throws IOException {
        while (true) {
            String command = field();
            if (!command.equals("exec")) {
                continue;
            }
            long seq = Long.parseLong(field());
            int count = Integer.parseInt(field());
            Map<String, String> env = new LinkedHashMap<>();
            for (int i = 0; i < count; i++) {
                env.put(field(), field());
            }
            execute(seq, env, field());
        }
    }

    private String field() throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        while (true) {
            int b = control.read();
            if (b < 0) {
                System.exit(0);
            }
            if (b == 0) {
                return bytes.toString(StandardCharsets.UTF_8);
            }
            bytes.write(b);
        }
    }

    private void execute(long seq, Map<String, String> env, String code) throws IOException {
        Map<String, String> saved = new LinkedHashMap<>();
        for (Map.Entry<String, String> entry : env.entrySet()) {
            saved.put(entry.getKey(), System.getProperty(entry.getKey()));
            System.setProperty(entry.getKey(), entry.getValue());
        }
        try {
            run(code);
        } finally {
            for (Map.Entry<String, String> entry : saved.entrySet()) {
                if (entry.getValue() == null) {
                    System.clearProperty(entry.getKey());
                } else {
                    System.setProperty(entry.getKey(), entry.getValue());
                }
            }
            emit("{\"t\":\"done\",\"seq\":" + seq + "}");
        }
    }

    private void run(String code) throws IOException {
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        List<String> snippets = new ArrayList<>();
        String rest = code;
        while (!rest.isBlank()) {
            SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(rest);
            if (!info.completeness().isComplete()) {
                snippets.add(rest);
                break;
            }
            snippets.add(info.source());
            rest = info.remaining();
        }
        for (int i = 0; i < snippets.size(); i++) {
            for (SnippetEvent event : shell.eval(snippets.get(i))) {
                if (event.causeSnippet() != null) {
                    continue;
                }
                if (event.exception() != null) {
                    report(event.exception());
                    return;
                }
                if (event.status() == Snippet.Status.REJECTED) {
                    String messages = shell.diagnostics(event.snippet())
                            .map(d -> d.getMessage(null))
                            .collect(Collectors.joining("\n"));
                    emit(error("CompilationError", messages.isEmpty() ? "the snippet does not compile" : messages, event.snippet().source()));
                    return;
                }
                boolean expression = event.snippet().kind() == Snippet.Kind.EXPRESSION
                        || event.snippet().subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
                if (i == snippets.size() - 1 && expression && event.value() != null) {
                    String text = text(event.snippet(), event.value());
                    emit("{\"t\":\"result\",\"main\":true,\"data\":{\"text/plain\":" + json(text) + "}}");
                }
            }
        }
    }

    /** JShell's text of a value; a string's literal is decoded and quoted as the protocol expects. */
    private static String text(Snippet snippet, String value) {
        String type = snippet instanceof VarSnippet ? ((VarSnippet) snippet).typeName()
                : snippet instanceof ExpressionSnippet ? ((ExpressionSnippet) snippet).typeName() : "";
        if (!(type.equals("String") || type.equals("java.lang.String")) || value.length() < 2 || !value.startsWith("\"")) {
            return value;
        }
        StringBuilder out = new StringBuilder("'");
        for (int i = 1; i < value.length() - 1; i++) {
            char c = value.charAt(i);
            if (c != '\\' || i + 1 >= value.length() - 1) {
                out.append(c);
                continue;
            }
            char next = value.charAt(++i);
            switch (next) {
                case 'n': out.append('\n'); break;
                case 't': out.append('\t'); break;
                case 'r': out.append('\r'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'u':
                    if (i + 4 < value.length()) {
                        out.append((char) Integer.parseInt(value.substring(i + 1, i + 5), 16));
                        i += 4;
                    }
                    break;
                default: out.append(next);
            }
        }
        return out.append('\'').toString();
    }

    private void report(Exception exception) throws IOException {
        String name = exception.getClass().getSimpleName();
        String value = exception.getMessage() == null ? "" : exception.getMessage();
        if (exception instanceof EvalException) {
            name = ((EvalException) exception).getExceptionClassName();
            name = name.substring(name.lastIndexOf('.') + 1);
        } else if (exception.getClass().getSimpleName().equals("UnresolvedReferenceException")) {
            name = "UnresolvedReference";
            value = "the snippet uses a declaration that does not compile";
        }
        StringWriter trace = new StringWriter();
        exception.printStackTrace(new PrintWriter(trace));
        emit(error(name, value, trace.toString()));
    }

    private static String error(String name, String value, String traceback) {
        return "{\"t\":\"error\",\"name\":" + json(name) + ",\"value\":" + json(value) + ",\"traceback\":" + json(traceback) + "}";
    }

    private void emit(String event) throws IOException {
        System.out.flush();
        System.err.flush();
        byte[] bytes = event.getBytes(StandardCharsets.UTF_8);
        synchronized (events) {
            events.write(bytes);
            events.write(0);
            events.flush();
        }
    }

    static String json(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }
}
