// Node.js driver of agent-sandbox-server code contexts (embedded in the binary).
//
// Runs cells in this process's global scope, so variables, functions and
// required modules persist from one cell to the next. Its argument is the
// language: `javascript`, or `typescript` (types are stripped first, by
// Node.js itself when it can, else by the `typescript` package; without
// either the driver reports it missing). Cells with `import` declarations or
// top-level `await` are rewritten by cellRewriter (node_cells.js). Commands arrive on
// fd 3 as NUL-separated fields; events leave on fd 4 as JSON objects each
// followed by a NUL byte. console output becomes "out" events; anything
// written to fds 1 and 2 directly reaches the daemon through those pipes.
// SIGINT interrupts the running cell and is ignored between cells.
(function main() {
  'use strict';
  const fs = require('fs');
  const net = require('net');
  const path = require('path');
  const util = require('util');
  const vm = require('vm');
  const { Console } = require('console');
  const { Writable } = require('stream');
  const Module = require('module');

  const CONTROL_FD = 3;
  const EVENTS_FD = 4;
  const MAX_TEXT = 32 * 1024;
  const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

  function emit(event) {
    const data = Buffer.from(JSON.stringify(event) + '\0', 'utf8');
    let offset = 0;
    while (offset < data.length) {
      try {
        offset += fs.writeSync(EVENTS_FD, data, offset, data.length - offset);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
      }
    }
  }

  function output(stream) {
    return new Writable({
      decodeStrings: false,
      write(chunk, encoding, callback) {
        const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
        for (let start = 0; start < text.length; start += MAX_TEXT) {
          emit({ t: 'out', s: stream, text: text.slice(start, start + MAX_TEXT).replace(LONE_SURROGATE, '\ufffd') });
        }
        callback();
      },
    });
  }

  const language = process.argv[1] === 'typescript' ? 'typescript' : 'javascript';
  const stripTypes = language === 'typescript' ? typeStripper() : null;
  if (language === 'typescript' && !stripTypes) {
    emit({ t: 'missing', program: 'a TypeScript compiler (Node.js 22.13 or later, or the typescript package: npm install -g typescript)' });
    process.exit(3);
  }
  Object.defineProperty(globalThis, '__abx_import', { value: (specifier) => import(specifier) });

  globalThis.console = new Console({ stdout: output('stdout'), stderr: output('stderr'), colorMode: false });
  globalThis.require = Module.createRequire(path.join(process.cwd(), '[cell]'));

  let running = null;
  process.on('SIGINT', () => {
    if (running && running.interrupt) running.interrupt();
  });
  process.on('uncaughtException', (error) => {
    console.error('Uncaught', error);
  });
  process.on('unhandledRejection', (reason) => {
    console.error('Unhandled promise rejection:', reason);
  });

  const DISPLAY = Symbol.for('Jupyter.display');

  function bundle(value) {
    let data = {};
    if (value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value[DISPLAY] === 'function') {
      try {
        const rich = value[DISPLAY]();
        if (rich && typeof rich === 'object') data = Object.assign({}, rich);
      } catch (e) {
        data = {};
      }
    }
    // A string is quoted as the protocol expects; the daemon removes exactly this pair of quotes.
    if (typeof data['text/plain'] !== 'string') data['text/plain'] = typeof value === 'string' ? `'${value}'` : util.inspect(value);
    return data;
  }

  function traceback(stack) {
    return String(stack)
      .split('\n')
      .filter((line) => !/^\s+at .*(node:|\[eval\]|<anonymous>\)?$)/.test(line) || /<cell \d+>/.test(line))
      .join('\n');
  }

  function report(error) {
    let name = 'Error';
    let value = '';
    let stack = '';
    if (error && error.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
      name = 'Interrupted';
      value = 'Script execution was interrupted by SIGINT';
    } else if (error instanceof Error || (error && typeof error === 'object' && 'stack' in error)) {
      name = error.name || 'Error';
      value = String(error.message === undefined ? '' : error.message);
      stack = traceback(error.stack || '');
    } else {
      value = util.inspect(error);
    }
    emit({ t: 'error', name, value, traceback: stack });
  }

  function typeStripper() {
    const builtin = Module.stripTypeScriptTypes;
    if (typeof builtin === 'function') {
      return (code) => {
        try {
          return builtin(code, { mode: 'strip' });
        } catch (error) {
          return builtin(code, { mode: 'transform' });
        }
      };
    }
    const global = path.resolve(process.execPath, '..', '..', 'lib', 'node_modules');
    for (const base of [process.cwd(), global, '/usr/local/lib/node_modules', '/usr/lib/node_modules']) {
      try {
        const ts = require(require.resolve('typescript', { paths: [base] }));
        const compilerOptions = { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: true };
        return (code, fileName) => ts.transpileModule(code, { fileName: fileName + '.ts', compilerOptions }).outputText;
      } catch (error) {
        // not there: try the next place
      }
    }
    return null;
  }

  function compile(code, filename) {
    const source = stripTypes ? stripTypes(code, filename) : code;
    try {
      return new vm.Script(cellRewriter.declareGlobally(source), { filename });
    } catch (error) {
      if (!(error instanceof SyntaxError) || !cellRewriter.needsRewrite(source)) throw error;
      // import declarations or top-level await: run the cell as an async function.
      try {
        return new vm.Script(cellRewriter.rewrite(source, true), { filename });
      } catch (again) {
        return new vm.Script(cellRewriter.rewrite(source, false), { filename });
      }
    }
  }

  function interruptible(promise) {
    return new Promise((resolve, reject) => {
      running.interrupt = () => {
        const error = new Error('Script execution was interrupted by SIGINT');
        error.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
        reject(error);
      };
      promise.then(resolve, reject);
    });
  }

  async function execute(seq, env, code) {
    const saved = env.map(([name]) => [name, Object.prototype.hasOwnProperty.call(process.env, name) ? process.env[name] : undefined]);
    for (const [name, value] of env) process.env[name] = value;
    running = { seq, interrupt: null };
    try {
      let value = compile(code, '<cell ' + seq + '>').runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (value !== null && typeof value === 'object' && typeof value.then === 'function') {
        value = await interruptible(value);
      }
      if (value !== undefined) emit({ t: 'result', main: true, data: bundle(value) });
    } catch (error) {
      report(error);
    } finally {
      running = null;
      for (const [name, old] of saved) {
        if (old === undefined) delete process.env[name];
        else process.env[name] = old;
      }
      emit({ t: 'done', seq });
    }
  }

  let buffered = Buffer.alloc(0);
  const fields = [];
  let busy = false;

  function pump() {
    while (!busy) {
      if (fields.length === 0) return;
      if (fields[0] !== 'exec') {
        fields.shift();
        continue;
      }
      if (fields.length < 3) return;
      const count = Number(fields[2]);
      const needed = 4 + 2 * count;
      if (fields.length < needed) return;
      const command = fields.splice(0, needed);
      const env = [];
      for (let i = 0; i < count; i++) env.push([command[3 + 2 * i], command[4 + 2 * i]]);
      busy = true;
      execute(Number(command[1]), env, command[needed - 1]).finally(() => {
        busy = false;
        pump();
      });
    }
  }

  const control = new net.Socket({ fd: CONTROL_FD, readable: true, writable: false });
  control.on('data', (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    let end;
    while ((end = buffered.indexOf(0)) !== -1) {
      fields.push(buffered.subarray(0, end).toString('utf8'));
      buffered = buffered.subarray(end + 1);
    }
    pump();
  });
  control.on('end', () => process.exit(0));
  control.on('error', () => process.exit(0));

  emit({ t: 'ready', version: process.version });
})();
