// llama-server's opt-in host tools in okapi serve: /tools (--tools, MCP servers) and /cors-proxy
// (--ui-mcp-proxy). Off without their flags; with them, the shapes llama-server answers, hostile
// requests refused, and MCP servers (tests/server/fixtures/mcp_test_server.py) called, respawned
// after a crash, timed out, and stopped with the server without leaving a process behind. File
// tools work in a temporary directory only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { OKAPI_BIN, OKAPI_MODEL, get, post, requestOnce, sleep, sseData, startServer, within } from './support.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const MCP_SERVER = path.join(here, 'fixtures', 'mcp_test_server.py');
const PYTHON = 'python3';

// Running (a zombie left for an init that does not reap is not: it was killed).
const alive = (pid) => {
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

test('without their flags /tools and /cors-proxy answer 403', { timeout: 60_000 }, async () => {
  const server = await startServer([], { ctx: 256, slots: 1 });
  try {
    for (const res of [await get(server.base, '/tools'), await post(server.base, '/tools', { tool: 'read_file', params: { path: '/etc/passwd' } }),
      await get(server.base, '/cors-proxy?url=http://127.0.0.1:1/')]) {
      assert.equal(res.status, 403, res.text);
      assert.equal(res.json.error.type, 'feature_disabled');
    }
  } finally {
    await server.stop();
  }
});

test('a bad tools setup stops the start with a clear error', { timeout: 60_000 }, async () => {
  const run = (args) => new Promise((resolve) => {
    const child = spawn(OKAPI_BIN, ['serve', '-m', OKAPI_MODEL, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    child.on('exit', (code) => resolve({ code, err }));
  });
  for (const [args, message] of [
    [['--mcp-servers-json', 'not valid json'], /--mcp-servers-json: the MCP servers config is not JSON/],
    [['--mcp-servers-json', '{"mcpServers": {"x": {"command": "a", "args": [1]}}}'], /"args" must be an array of strings/],
    [['--mcp-servers-config', '/nonexistent/okapi-mcp.json'], /--mcp-servers-config \/nonexistent\/okapi-mcp.json: cannot open/],
    [['--tools', 'read_file,rm_rf'], /unknown tool "rm_rf"/],
    [['--tools', 'all', '--tools-runtime', 'ssh:-oProxyCommand=x'], /invalid ssh target/],
  ]) {
    const { code, err } = await run(args);
    assert.notEqual(code, 0, `${args.join(' ')} started`);
    assert.match(err, /okapi: error: /);
    assert.match(err, message);
  }
});

test('built-in tools: shapes, cwd header, edits, searches, shell, hostile requests', { timeout: 120_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'okapi-tools-'));
  const server = await startServer(['--tools', 'all'], { ctx: 256, slots: 1 });
  const call = async (tool, params, headers = {}) => {
    const res = await post(server.base, '/tools', { tool, params }, { headers: { 'x-tool-cwd': dir, ...headers } });
    assert.equal(res.status, 200, res.text);
    return res.json;
  };
  try {
    const list = await get(server.base, '/tools');
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.map((t) => t.tool),
      ['read_file', 'file_glob_search', 'grep_search', 'exec_shell_command', 'write_file', 'edit_file', 'get_info']);
    for (const t of list.json) {
      assert.equal(t.type, 'server');
      assert.equal(t.definition.type, 'function');
      assert.equal(t.definition.function.name, t.tool);
      assert.equal(typeof t.permissions.write, 'boolean');
    }

    // Relative paths resolve against x-tool-cwd, which a "cwd" param cannot override.
    assert.equal((await call('write_file', { path: 'sub/a.txt', content: 'one\ntwo\nthree\n', cwd: '/' })).result,
      'file written successfully');
    assert.equal(fs.readFileSync(path.join(dir, 'sub', 'a.txt'), 'utf8'), 'one\ntwo\nthree\n');
    assert.equal((await call('read_file', { path: 'sub/a.txt', start_line: 2, end_line: 2, append_loc: true })).plain_text_response,
      '2\u2192two\n');
    const edited = await call('edit_file', { path: 'sub/a.txt', edits: [{ old_text: 'one', new_text: 'ONE' }, { old_text: 'three\n', new_text: 'three\nfour\n' }] });
    assert.equal(edited.edits_applied, 2);
    assert.equal(fs.readFileSync(path.join(dir, 'sub', 'a.txt'), 'utf8'), 'ONE\ntwo\nthree\nfour\n');
    // Typographic quotes in old_text still find the ASCII text.
    fs.writeFileSync(path.join(dir, 'q.txt'), 'say "hi"  \nbye\n');
    await call('edit_file', { path: 'q.txt', edits: [{ old_text: 'say \u201chi\u201d', new_text: 'say "hello"' }] });
    assert.equal(fs.readFileSync(path.join(dir, 'q.txt'), 'utf8'), 'say "hello"\nbye\n');
    fs.writeFileSync(path.join(dir, 'dup.txt'), 'dup\ndup\n');
    assert.match((await call('edit_file', { path: 'dup.txt', edits: [{ old_text: 'dup', new_text: 'x' }] })).error, /unique/);
    assert.match((await call('edit_file', { path: 'sub/a.txt', edits: [{ old_text: 'ONE\ntwo', new_text: 'a' }, { old_text: 'two', new_text: 'b' }] })).error, /overlap/);
    assert.match((await call('read_file', { path: 'missing.txt' })).error, /cannot stat file/);
    const b64 = await call('read_file', { path: 'sub/a.txt' }, { 'x-resp-type': 'base64' });
    assert.equal(Buffer.from(b64.base64, 'base64').toString(), 'ONE\ntwo\nthree\nfour\n');

    // Searches: junk directories listed but not walked; include globs; limits.
    fs.mkdirSync(path.join(dir, 'node_modules', 'pkg'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'node_modules', 'pkg', 'index.js'), 'needle\n');
    fs.writeFileSync(path.join(dir, 'sub', 'b.md'), 'a needle here\n');
    const dirs = await call('file_glob_search', { path: '.', type: 'dir' });
    assert.deepEqual(dirs.entries.map((e) => e.path).sort(), ['node_modules', 'sub']);
    assert.equal(dirs.base, dir);
    const all = await call('file_glob_search', { path: '.', type: 'all', include: '*.md' });
    assert.deepEqual(all.entries, [{ path: 'sub/b.md', type: 'file' }]);
    const limited = await call('file_glob_search', { path: '.', limit: 1 });
    assert.equal(limited.entries.length, 1);
    assert.match(limited.plain_text_response, /Total matches: 4/);
    assert.match((await call('file_glob_search', { path: '.', type: 'bogus' })).error, /invalid type/);
    const grep = await call('grep_search', { path: '.', pattern: 'ne+dle', return_line_numbers: true });
    assert.match(grep.plain_text_response, /^sub\/b\.md:1:a needle here$/m);
    assert.match(grep.plain_text_response, /Total matches: 1/);
    assert.match((await call('grep_search', { path: '.', pattern: '(' })).error, /invalid regex/);
    // A hostile glob is linear, not exponential.
    const t0 = Date.now();
    await call('file_glob_search', { path: '.', include: `${'**/'.repeat(40)}*x*` });
    assert.ok(Date.now() - t0 < 5000);

    // The shell: output, exit code, the cwd, a timeout, and a background child that does not hold the call.
    const shell = await call('exec_shell_command', { command: 'pwd; echo oops >&2; exit 3' });
    assert.equal(shell.plain_text_response, `${fs.realpathSync(dir)}\noops\n\n[exit code: 3]`);
    const slow = await call('exec_shell_command', { command: 'sleep 5', timeout: 1 });
    assert.match(slow.plain_text_response, /\[exit due to timed out\]/);
    const bg = await call('exec_shell_command', { command: `sleep 30 & echo $! > ${dir}/bg.pid; echo started` });
    assert.match(bg.plain_text_response, /started\n\n\[exit code: 0\]/);
    const bgPid = Number(fs.readFileSync(path.join(dir, 'bg.pid'), 'utf8'));
    for (let i = 0; i < 50 && alive(bgPid); i++) await sleep(20);
    assert.equal(alive(bgPid), false, 'the background child was killed');
    const bytes = await call('exec_shell_command', { command: "printf 'a\\377b'" });
    assert.equal(bytes.plain_text_response, 'a\ufffdb\n[exit code: 0]');

    const res = await fetch(`${server.base}/tools`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'x-tool-cwd': dir },
      body: JSON.stringify({ tool: 'exec_shell_command', stream: true, params: { command: 'echo hello; sleep 0.2; echo world' } }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /text\/event-stream/);
    const events = [];
    for await (const data of sseData(res)) events.push(JSON.parse(data));
    assert.deepEqual(events.at(-1), { done: true });
    assert.equal(events.slice(0, -1).map((e) => e.chunk).join(''), 'hello\nworld\n\n[exit code: 0]');

    // Runtimes that are unknown or inject options: 500, never the host.
    for (const [runtime, message] of [['fake:x', /unknown tool runtime/], ['ssh:-oProxyCommand=touch /tmp/pwned', /invalid ssh target/],
      ['docker-container:--privileged', /invalid container id/], ['docker:busybox', /must name a running container/]]) {
      const r = await post(server.base, '/tools', { tool: 'exec_shell_command', params: { command: 'echo hi' } }, { headers: { 'x-tool-runtime': runtime } });
      assert.equal(r.status, 500, r.text);
      assert.match(r.json.error.message, message);
    }
    // Malformed requests: 4xx.
    for (const [body, status] of [['not json', 400], [JSON.stringify([1]), 400], [JSON.stringify({ tool: 7 }), 400],
      [JSON.stringify({ tool: 'nope' }), 404], [JSON.stringify({ tool: 'read_file', params: [] }), 400],
      [JSON.stringify({ tool: 'read_file', params: { path: 5 } }), 400],
      [JSON.stringify({ tool: 'read_file', params: { path: 'x' }, stream: true }), 400],
      [JSON.stringify({ tool: 'edit_file', params: { path: 'x', edits: [7] } }), 400]]) {
      const r = await post(server.base, '/tools', body);
      assert.equal(r.status, status, `${body}: ${r.text}`);
      assert.ok(r.json.error.message);
    }
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('MCP servers: listed, called, respawned, timed out, stopped with the server', { timeout: 120_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'okapi-mcp-'));
  const pidfile = path.join(dir, 'grandchild.pid');
  const config = {
    mcpServers: {
      echo: { command: PYTHON, args: [MCP_SERVER, '--grandchild', pidfile] },
      slow: { command: PYTHON, args: [MCP_SERVER], timeout_ms: 300 },
      broken: { command: 'okapi-no-such-command-12345' },
    },
  };
  const server = await startServer(['--mcp-servers-json', JSON.stringify(config)], { ctx: 256, slots: 1 });
  const call = async (tool, params) => {
    const res = await post(server.base, '/tools', { tool, params });
    assert.equal(res.status, 200, res.text);
    return res.json;
  };
  try {
    const list = (await get(server.base, '/tools')).json;
    const names = list.map((t) => t.tool);
    assert.deepEqual(names.filter((n) => n.startsWith('echo_')), ['echo_echo', 'echo_add', 'echo_sleep', 'echo_crash', 'echo_fail']);
    assert.ok(!names.some((n) => n.startsWith('broken_')));
    assert.ok(!names.includes('read_file'), 'no built-in tools without --tools');
    const echo = list.find((t) => t.tool === 'echo_echo');
    assert.equal(echo.type, 'mcp');
    assert.deepEqual(echo.definition.function.parameters.required, ['message']);

    assert.deepEqual(await call('echo_echo', { message: 'hi' }), { plain_text_response: 'echo: hi' });
    assert.deepEqual(await call('echo_add', { a: 2, b: 3 }), { plain_text_response: '5' });
    assert.deepEqual(await call('echo_fail', {}), { error: 'it failed' });
    // Ten at once on one server: each gets its own reply.
    const many = await Promise.all([...Array(10).keys()].map((i) => call('echo_echo', { message: `m${i}` })));
    many.forEach((r, i) => assert.equal(r.plain_text_response, `echo: m${i}`));
    // It exits after answering; the next call starts it again.
    assert.equal((await call('echo_crash', {})).plain_text_response, 'crashing');
    await sleep(200);
    assert.deepEqual(await call('echo_echo', { message: 'again' }), { plain_text_response: 'echo: again' });
    // timeout_ms 300: an error, and the late reply does not answer the next call.
    assert.match((await call('slow_sleep', { seconds: 1 })).error, /timed out/);
    await sleep(900);
    assert.deepEqual(await call('slow_echo', { message: 'x' }), { plain_text_response: 'echo: x' });

    const grandchild = Number(fs.readFileSync(pidfile, 'utf8'));
    assert.ok(alive(grandchild));
    // A slow call in flight does not hold the stop up.
    const inFlight = requestOnce(server.base, 'POST', '/tools', { tool: 'echo_sleep', params: { seconds: 20 } }).catch(() => null);
    await sleep(300);
    const t0 = Date.now();
    server.signal('SIGTERM');
    const exit = await within(server.exited, 3000);
    assert.ok(exit, 'the server did not stop within 3 s of SIGTERM with a slow MCP call in flight');
    assert.equal(exit.code, 0);
    assert.ok(Date.now() - t0 < 3000, `stop took ${Date.now() - t0} ms`);
    await inFlight;
    for (let i = 0; i < 50 && alive(grandchild); i++) await sleep(20);
    assert.equal(alive(grandchild), false, 'the MCP server\'s own child outlived the server');
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('/cors-proxy forwards only explicit proxy headers, the status and the body', { timeout: 60_000 }, async () => {
  let captured = null;
  const target = http.createServer((req, res) => {
    captured = { method: req.method, url: req.url, headers: req.headers, body: '' };
    req.on('data', (d) => { captured.body += d; });
    req.on('end', () => {
      if (req.url === '/none') { res.writeHead(204); res.end(); return; }
      if (req.url === '/redirect') { res.writeHead(302, { Location: '/chunked' }); res.end(); return; }
      res.writeHead(req.url === '/chunked' ? 201 : 200, { 'Content-Type': 'text/plain', 'Set-Cookie': 'a=b', 'X-Target': 'yes' });
      if (req.url === '/chunked') { res.write('part one, '); setTimeout(() => res.end('part two'), 50); } else res.end('ok');
    });
  });
  await new Promise((resolve) => target.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${target.address().port}`;
  const server = await startServer(['--ui-mcp-proxy', '--api-key', 'sekrit'], { ctx: 256, slots: 1 });
  const auth = { Authorization: 'Bearer sekrit' };
  try {
    let res = await get(server.base, `/cors-proxy?url=${encodeURIComponent(`${url}/capture?q=1`)}`, {
      headers: { ...auth, 'Proxy-Authorization': 'Basic x', 'X-Api-Key': 'sekrit', Cookie: 'session=s',
        'x-llama-server-proxy-header-accept': 'application/json', 'x-llama-server-proxy-header-authorization': 'Bearer explicit' },
    });
    assert.equal(res.status, 200);
    assert.equal(res.text, 'ok');
    assert.equal(res.headers.get('x-target'), 'yes');
    assert.equal(res.headers.get('set-cookie'), null);
    assert.equal(captured.url, '/capture?q=1');
    assert.equal(captured.headers.accept, 'application/json');
    assert.equal(captured.headers.authorization, 'Bearer explicit');
    for (const h of ['proxy-authorization', 'x-api-key', 'cookie']) assert.equal(captured.headers[h], undefined, h);

    res = await post(server.base, `/cors-proxy?url=${url}/none`, { jsonrpc: '2.0' }, { headers: auth });
    assert.equal(res.status, 204);
    assert.equal(res.text, '');
    assert.equal(captured.body, '{"jsonrpc":"2.0"}');
    res = await get(server.base, `/cors-proxy?url=${url}/redirect`, { headers: auth });
    assert.equal(res.status, 201);
    assert.equal(res.text, 'part one, part two');
    // The proxy reaches the server itself too (llama-server's test: its /models).
    res = await get(server.base, `/cors-proxy?url=${server.base}/models&x-llama-server-proxy-header-authorization=no`, {
      headers: { ...auth, 'x-llama-server-proxy-header-authorization': 'Bearer sekrit' } });
    assert.equal(res.status, 200);
    assert.ok(res.json.data);

    for (const [bad, status] of [['', 400], ['ftp://x/', 400], ['https://example.com/', 501], ['http://user:pw@127.0.0.1/', 400],
      ['http://127.0.0.1:99999/', 400], ['http:///nohost', 400], ['http://127.0.0.1:1/', 502]]) {
      res = await get(server.base, `/cors-proxy?url=${encodeURIComponent(bad)}`, { headers: auth });
      assert.equal(res.status, status, `${bad}: ${res.text}`);
    }
    res = await get(server.base, `/cors-proxy?url=${url}/`);
    assert.equal(res.status, 401, 'the API key guards the proxy too');
  } finally {
    await server.stop();
    target.close();
  }
});
