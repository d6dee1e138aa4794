// Node.js driver of agent-sandbox-server code contexts (embedded in the binary).
//
// Runs cells in this process's global scope, so variables, functions and
// required modules persist from one cell to the next. Commands arrive on
// fd 3 as NUL-separated fields; events leave on fd 4 as JSON objects each
// followed by a NUL byte. console output becomes "out" events; anything
// written to fds 1 and 2 directly reaches the daemon through those pipes.
// SIGINT interrupts the running cell and is ignored between cells.
'use strict';
(function main() {
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
    if (typeof data['text/plain'] !== 'string') data['text/plain'] = util.inspect(value);
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

  function compile(code, filename) {
    try {
      return new vm.Script(code, { filename });
    } catch (error) {
      if (error instanceof SyntaxError && /await/.test(error.message)) {
        // Top-level await: run the cell as an async function (its declarations stay local).
        return new vm.Script('(async () => {\n' + code + '\n})()', { filename, lineOffset: -1 });
      }
      throw error;
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
