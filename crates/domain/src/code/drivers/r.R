# R driver of agent-sandbox-server code contexts (embedded in the binary,
# written to a private file and run by `Rscript --vanilla <file>`).
#
# Runs cells in the global environment, so variables, functions and loaded
# packages persist. Commands arrive on fd 3 as NUL-separated fields ("exec",
# seq, n, n name/value pairs, code); events leave on fd 4 as JSON objects
# each followed by a NUL byte. Output of print/cat goes to fd 1 (flushed
# before each event, so it arrives in order), messages and warnings to fd 2.
# Each visible top-level value becomes a result (its printed text), the
# last expression's being the main one. SIGINT interrupts the running cell.
local({
  ctl <- file("/dev/fd/3", open = "rb")
  evt <- file("/dev/fd/4", open = "wb")
  options(device = function(...) grDevices::pdf(NULL, ...), warn = 1)

  json_string <- function(x) {
    x <- enc2utf8(paste(x, collapse = "\n"))
    x <- gsub("\\", "\\\\", x, fixed = TRUE)
    x <- gsub("\"", "\\\"", x, fixed = TRUE)
    x <- gsub("\n", "\\n", x, fixed = TRUE)
    x <- gsub("\r", "\\r", x, fixed = TRUE)
    x <- gsub("\t", "\\t", x, fixed = TRUE)
    codes <- utf8ToInt(x)
    if (any(codes < 32L, na.rm = TRUE)) {
      chars <- vapply(codes, function(c) if (c < 32L) sprintf("\\u%04x", c) else intToUtf8(c), "")
      x <- paste(chars, collapse = "")
    }
    paste0("\"", x, "\"")
  }

  emit <- function(...) {
    flush(stdout())
    fields <- list(...)
    body <- paste0(vapply(names(fields), function(k) {
      v <- fields[[k]]
      value <- if (is.character(v)) json_string(v) else if (is.logical(v)) tolower(as.character(v)) else as.character(v)
      paste0("\"", k, "\":", value)
    }, ""), collapse = ",")
    writeBin(c(charToRaw(enc2utf8(paste0("{", body, "}"))), as.raw(0)), evt)
    flush(evt)
  }

  result <- function(value, main) {
    text <- paste(utils::capture.output(print(value)), collapse = "\n")
    flush(stdout())
    data <- paste0("{\"text/plain\":", json_string(text), "}")
    writeBin(c(charToRaw(paste0("{\"t\":\"result\",\"main\":", tolower(main), ",\"data\":", data, "}")), as.raw(0)), evt)
    flush(evt)
  }

  field <- function() {
    bytes <- raw(256)
    n <- 0L
    repeat {
      # An interrupt that arrives between cells is dropped.
      byte <- tryCatch(readBin(ctl, "raw", 1L), interrupt = function(i) NULL)
      if (is.null(byte)) next
      if (length(byte) == 0L) quit(save = "no", status = 0)
      if (byte == as.raw(0)) break
      if (n == length(bytes)) bytes <- c(bytes, raw(length(bytes)))
      n <- n + 1L
      bytes[n] <- byte
    }
    text <- rawToChar(bytes[seq_len(n)])
    Encoding(text) <- "UTF-8"
    text
  }

  report <- function(e, name) {
    call <- conditionCall(e)
    trace <- if (is.null(call)) "" else paste("Error in", paste(deparse(call), collapse = "\n"))
    emit(t = "error", name = name, value = conditionMessage(e), traceback = trace)
  }

  run <- function(code) {
    exprs <- parse(text = code, keep.source = FALSE)
    for (i in seq_along(exprs)) {
      shown <- withVisible(eval(exprs[[i]], envir = globalenv()))
      if (shown$visible) result(shown$value, i == length(exprs))
    }
  }

  execute <- function(seq, env, code) {
    saved <- Sys.getenv(names(env), unset = NA, names = TRUE)
    if (length(env)) do.call(Sys.setenv, as.list(env))
    tryCatch(
      withCallingHandlers(run(code), warning = function(w) {
        message("Warning message:\n", conditionMessage(w))
        invokeRestart("muffleWarning")
      }),
      interrupt = function(i) emit(t = "error", name = "Interrupted", value = "the cell was interrupted by SIGINT", traceback = ""),
      error = function(e) report(e, if (inherits(e, "simpleError")) "Error" else class(e)[1])
    )
    for (name in names(saved)) {
      if (is.na(saved[[name]])) Sys.unsetenv(name) else do.call(Sys.setenv, as.list(saved[name]))
    }
    emit(t = "done", seq = seq)
  }

  emit(t = "ready", version = paste(R.version$major, R.version$minor, sep = "."))
  repeat {
    command <- field()
    if (command != "exec") next
    seq <- as.integer(field())
    count <- as.integer(field())
    env <- character(0)
    for (i in seq_len(count)) {
      name <- field()
      env[[name]] <- field()
    }
    execute(seq, env, field())
  }
})
