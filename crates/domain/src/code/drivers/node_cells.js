// Cell rewriting of the Node.js driver (embedded in the binary, before node.js).
//
// A cell runs as a script whose top-level `let`, `const` and `class`
// declarations are made `var` ones, so running a cell again (or declaring a
// name again) works as in a REPL. One with static `import`
// declarations or top-level `await` cannot be a script: it is rewritten into
// an async function whose top-level declarations become assignments to
// globals (so they outlive the cell, as in a REPL), whose imports become
// dynamic imports through `__abx_import`, and whose last expression
// statement is returned as the cell's value. The rewriting works on tokens
// (strings, template literals, comments and regular expressions are skipped
// whole) and adds no line, so stack traces keep the cell's line numbers.
//
// The daemon puts this file and node.js in one block, so cellRewriter is not
// a global that a cell could see or clash with.
const cellRewriter = (() => {
  'use strict';
  const BEFORE_REGEX = new Set(['return', 'typeof', 'case', 'do', 'else', 'in', 'instanceof', 'new', 'delete', 'void', 'throw', 'yield', 'await', 'of']);
  const OPERATORS = ['...', '===', '!==', '**=', '<<=', '>>=', '&&=', '||=', '??=', '=>', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '++', '--', '+=', '-=', '*=', '/=', '%=', '**', '<<', '>>', '&=', '|=', '^='];
  const CONTINUES = new Set(['in', 'instanceof', 'of', 'else', 'catch', 'finally', 'extends']);
  const NO_VALUE = new Set(['var', 'let', 'const', 'function', 'class', 'if', 'for', 'while', 'do', 'switch', 'try', 'return', 'throw', 'break', 'continue', 'import', 'export', 'debugger', 'with']);

  function tokenize(src) {
    const tokens = [];
    const stack = [];
    let i = 0;
    let nl = false;
    const push = (type, start) => {
      tokens.push({ type, value: src.slice(start, i), start, end: i, depth: stack.length, nl });
      nl = false;
    };
    const regexAllowed = () => {
      const prev = tokens[tokens.length - 1];
      if (!prev) return true;
      if (prev.type === 'name') return BEFORE_REGEX.has(prev.value);
      return prev.type === 'punct' && !/^[)\]}]$/.test(prev.value);
    };
    const template = (start) => {
      while (i < src.length) {
        const c = src[i];
        if (c === '\\') i += 2;
        else if (c === '`') { i++; break; }
        else if (c === '$' && src[i + 1] === '{') { i += 2; push('template', start); stack.push('${'); return; }
        else i++;
      }
      push('template', start);
    };
    while (i < src.length) {
      const c = src[i];
      const start = i;
      if (c === '\n') { nl = true; i++; continue; }
      if (/\s/.test(c)) { i++; continue; }
      if (c === '/' && src[i + 1] === '/') { while (i < src.length && src[i] !== '\n') i++; continue; }
      if (c === '/' && src[i + 1] === '*') {
        const close = src.indexOf('*/', i + 2);
        i = close < 0 ? src.length : close + 2;
        if (src.slice(start, i).includes('\n')) nl = true;
        continue;
      }
      if (c === '"' || c === "'") {
        i++;
        while (i < src.length && src[i] !== c && src[i] !== '\n') i += src[i] === '\\' ? 2 : 1;
        i++;
        push('string', start);
      } else if (c === '`') {
        i++;
        template(start);
      } else if (c === '}' && stack[stack.length - 1] === '${') {
        stack.pop();
        i++;
        template(start);
      } else if (c === '/' && regexAllowed()) {
        let inClass = false;
        for (i++; i < src.length && src[i] !== '\n'; i++) {
          if (src[i] === '\\') i++;
          else if (src[i] === '[') inClass = true;
          else if (src[i] === ']') inClass = false;
          else if (src[i] === '/' && !inClass) break;
        }
        i++;
        while (/[A-Za-z]/.test(src[i] || '')) i++;
        push('regex', start);
      } else if (/[A-Za-z_$#\u0080-\uffff]/.test(c)) {
        for (i++; i < src.length && /[\w$\u0080-\uffff]/.test(src[i]); i++);
        push('name', start);
      } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(src[i + 1] || ''))) {
        for (i++; i < src.length && /[\w.]/.test(src[i]); i++);
        push('num', start);
      } else if ('([{'.includes(c)) {
        i++;
        push('punct', start);
        stack.push(c);
      } else if (')]}'.includes(c)) {
        stack.pop();
        i++;
        push('punct', start);
      } else {
        i += (OPERATORS.find((op) => src.startsWith(op, i)) || c).length;
        push('punct', start);
      }
    }
    return tokens;
  }

  // Whether a top-level token starts a statement, given the top-level token before it.
  function starts(prev, token) {
    if (!prev) return true;
    if (prev.value === ';') return true;
    if (!token.nl) return false;
    if (token.type === 'punct' && !/^([{}!~]|\+\+|--)$/.test(token.value)) return false;
    if (token.type === 'name' && CONTINUES.has(token.value)) return false;
    if (token.type === 'template') return false;
    if (prev.type === 'punct') return /^([)\]}]|\+\+|--)$/.test(prev.value);
    return !(prev.type === 'name' && (BEFORE_REGEX.has(prev.value) || CONTINUES.has(prev.value)));
  }

  function statements(tokens) {
    const top = tokens.filter((t) => t.depth === 0);
    const list = [];
    top.forEach((token, k) => {
      if (starts(top[k - 1], token)) list.push([]);
      list[list.length - 1].push(token);
    });
    return list;
  }

  // The statement's tokens, nested ones included, as indexes into `tokens`.
  function span(tokens, statement) {
    const first = tokens.indexOf(statement[0]);
    const last = tokens.indexOf(statement[statement.length - 1]);
    return tokens.slice(first, last + 1);
  }

  function importClause(tokens, module) {
    const clause = tokens.map((t) => t.value).join(' ');
    const named = clause.match(/\{(.*)\}/);
    const star = clause.match(/\*\s+as\s+([\w$]+)/);
    const head = clause.split(/[{*]/)[0].replace(/,\s*$/, '').trim();
    const parts = [];
    if (star) {
      parts.push(`${star[1]} = await __abx_import(${module})`);
      if (head) parts.push(`${head} = ${star[1]}.default`);
      return parts.join(', ');
    }
    const fields = named ? named[1].split(',').map((f) => f.trim()).filter(Boolean).map((f) => f.replace(/\s+as\s+/, ': ')) : [];
    if (head) fields.unshift(`default: ${head}`);
    return `({ ${fields.join(', ')} } = await __abx_import(${module}))`;
  }

  function rewrite(src, withReturn) {
    const tokens = tokenize(src);
    const edits = [];
    const functions = [];
    const replace = (from, to, text) => edits.push({ from, to, text, seq: edits.length });
    const list = statements(tokens);
    list.forEach((statement, index) => {
      const all = span(tokens, statement);
      const [first, second] = statement;
      let ending = statement[statement.length - 1];
      const end = ending.value === ';' ? ending.start : ending.end;
      if (ending.value === ';') ending = statement[statement.length - 2] || ending;
      const lines = (from, to) => '\n'.repeat((src.slice(from, to).match(/\n/g) || []).length);
      if (first.value === 'export' && second) {
        const skip = second.value === 'default' ? second.end : first.end;
        if (second.value === '{' || second.value === '*') replace(first.start, end, lines(first.start, end));
        else replace(first.start, skip, ' '.repeat(skip - first.start));
        return;
      }
      if (first.value === 'import' && second && second.value !== '(' && second.value !== '.') {
        const from = all.findIndex((t) => t.value === 'from' && t.type === 'name');
        const module = from >= 0 ? all[from + 1] : second;
        const text = module.type !== 'string' ? null : from >= 0 ? `void (${importClause(all.slice(1, from), module.value)})` : `await __abx_import(${module.value})`;
        if (text) replace(first.start, module.end, text + lines(first.start, module.end));
        return;
      }
      if (['var', 'let', 'const'].includes(first.value) && second && (second.type === 'name' || second.value === '{' || second.value === '[')) {
        replace(first.start, first.end, 'void (');
        let declarator = [];
        const finish = () => {
          if (declarator.length === 1 && declarator[0].type === 'name') {
            const name = declarator[0].value;
            const fill = first.value === 'var' ? `typeof ${name} === "undefined" ? undefined : ${name}` : 'undefined';
            replace(declarator[0].end, declarator[0].end, ` = ${fill}`);
          }
          declarator = [];
        };
        for (const token of all.slice(1)) {
          if (token === statement[statement.length - 1] && token.value === ';') break;
          if (token.value === ',' && token.depth === 0) finish();
          else declarator.push(token);
        }
        finish();
        replace(end, end, ')');
        return;
      }
      const fn = first.value === 'async' && second && second.value === 'function' ? 1 : first.value === 'function' ? 0 : -1;
      if (fn >= 0) {
        const name = all.slice(fn + 1).find((t) => t.type === 'name');
        if (name) functions.push(name.value);
        return;
      }
      if (first.value === 'class' && second && second.type === 'name') {
        const body = statement.find((t) => t.value === '{');
        const close = body && statement[statement.indexOf(body) + 1];
        if (close) {
          replace(first.start, first.start, `${second.value} = `);
          replace(close.end, close.end, ';');
        }
        return;
      }
      const last = index === list.length - 1;
      if (withReturn && last && !NO_VALUE.has(first.value) && !['{', ';'].includes(first.value)) {
        replace(first.start, first.start, 'return (');
        replace(ending.end, ending.end, ')');
      }
    });
    // From the end; of two inserts at one place the later one is applied first, so it ends up after.
    edits.sort((a, b) => b.from - a.from || b.to - a.to || b.seq - a.seq);
    let out = src;
    for (const edit of edits) out = out.slice(0, edit.from) + edit.text + out.slice(edit.to);
    const prologue = functions.map((name) => `globalThis[${JSON.stringify(name)}] = ${name}; `).join('');
    return `(async () => { ${prologue}${out}\n})()`;
  }

  // The cell with its top-level let/const/class declarations made var ones (same lines and columns).
  function declareGlobally(src) {
    if (!/\b(let|const|class)\b/.test(src)) return src;
    const tokens = tokenize(src);
    const edits = [];
    for (const statement of statements(tokens)) {
      const [first, second] = statement;
      if (!second) continue;
      if ((first.value === 'let' || first.value === 'const') && (second.type === 'name' || second.value === '{' || second.value === '[')) {
        edits.push({ from: first.start, to: first.end, text: 'var'.padEnd(first.value.length) });
      } else if (first.value === 'class' && second.type === 'name') {
        const body = statement.find((t) => t.value === '{');
        const close = body && statement[statement.indexOf(body) + 1];
        if (!close) continue;
        edits.push({ from: close.end, to: close.end, text: ';' });
        edits.push({ from: first.start, to: first.start, text: `var ${second.value} = ` });
      }
    }
    edits.sort((a, b) => b.from - a.from);
    let out = src;
    for (const edit of edits) out = out.slice(0, edit.from) + edit.text + out.slice(edit.to);
    return out;
  }

  // Whether a cell has `await`, or top-level `import` or `export` (then rewriting may help).
  function needsRewrite(src) {
    return tokenize(src).some((t) => t.type === 'name' && (t.value === 'await' || (t.depth === 0 && (t.value === 'import' || t.value === 'export'))));
  }

  return { rewrite, needsRewrite, declareGlobally, tokenize };
})();
