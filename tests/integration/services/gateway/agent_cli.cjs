// Runs a coding-agent CLI that ships as a native binary (Codex CLI over the Responses API, Claude
// Code over the Anthropic Messages API) against a gateway through a recording proxy, once per
// prompt, each later prompt continuing the previous conversation, and prints one JSON object:
// each run's exit code and output tail, and each request's path, status and cache result (the
// `cairn` object of the answer, streamed or not).
//
//   node agent_cli.cjs GATEWAY_URL codex|claude BINARY WORK_DIR HOME_DIR PROMPT...
//
// Only Node.js built-ins; the agents reach nothing but the proxy on 127.0.0.1.
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');

const [gateway, agent, binary, workDir, homeDir, ...prompts] = process.argv.slice(2);
// Longest one agent run may take (the first prefills the agent's prompt cold).
const RUN_TIMEOUT_MS = 400 * 1000;
const API_KEY = 'local-test-key';
const upstream = new URL(gateway);
const requests = [];
let run = 0;

// The last object named "cairn" anywhere inside `value`.
function findCairn(value) {
  if (value === null || typeof value !== 'object') return undefined;
  let found;
  for (const [key, inner] of Object.entries(value)) {
    const deeper = key === 'cairn' ? inner : findCairn(inner);
    if (deeper !== undefined) found = deeper;
  }
  return found;
}

// The proxy: forwards every request unchanged and remembers what came back.
const proxy = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const record = { run, method: req.method, path: req.url };
    requests.push(record);
    const up = http.request(
      { host: upstream.hostname, port: upstream.port, path: req.url, method: req.method,
        headers: { ...req.headers, host: upstream.host } },
      (upRes) => {
        res.writeHead(upRes.statusCode, upRes.headers);
        let text = '';
        upRes.on('data', (c) => { text += c.toString(); res.write(c); });
        upRes.on('end', () => {
          res.end();
          record.status = upRes.statusCode;
          // The whole body, or each of the stream's data lines.
          for (const piece of [text, ...text.split('\n')]) {
            const json = piece.startsWith('data: ') ? piece.slice(6) : piece;
            let parsed;
            try { parsed = JSON.parse(json); } catch (e) { continue; }
            const cairn = findCairn(parsed);
            if (cairn !== undefined) record.cairn = cairn;
            if (parsed && parsed.type === 'error') record.error = parsed;
          }
        });
      });
    up.on('error', (e) => { record.error = String(e); res.destroy(); });
    up.end(Buffer.concat(chunks));
  });
});

// The command line and environment of one run of `agent`; `index` > 0 continues the
// conversation of the run before it.
function commandFor(index, prompt, port) {
  const base = { PATH: process.env.PATH, HOME: homeDir, TERM: 'dumb', NO_COLOR: '1' };
  if (agent === 'codex') {
    const provider = `model_providers.cairn={name="cairn",base_url="http://127.0.0.1:${port}/v1",` +
                     'env_key="CAIRN_TEST_KEY",wire_api="responses"}';
    const args = ['exec', '--skip-git-repo-check', '-c', provider, '-c', 'model_provider=cairn',
                  '-m', 'demo'];
    if (index > 0) args.push('resume', '--last');
    args.push(prompt);
    const codexHome = path.join(homeDir, '.codex');
    fs.mkdirSync(codexHome, { recursive: true });
    return { args, env: { ...base, CODEX_HOME: codexHome, CAIRN_TEST_KEY: API_KEY } };
  }
  if (agent === 'claude') {
    const args = ['-p', prompt, '--model', 'demo'];
    if (index > 0) args.push('--continue');
    return { args, env: { ...base, ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`,
                          ANTHROPIC_API_KEY: API_KEY, DISABLE_TELEMETRY: '1',
                          DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1',
                          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' } };
  }
  throw new Error(`unknown agent ${agent}`);
}

function runAgent(index, prompt) {
  return new Promise((resolve) => {
    const { args, env } = commandFor(index, prompt, proxy.address().port);
    const child = spawn(binary, args, { cwd: workDir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => { out += c.toString(); });
    child.stderr.on('data', (c) => { out += c.toString(); });
    // Every run is bounded: a hung agent is killed and reported with code null.
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.on('error', (e) => { out += String(e); });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output: out.slice(-3000) });
    });
  });
}

async function main() {
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const runs = [];
  for (const [index, prompt] of prompts.entries()) {
    runs.push(await runAgent(index, prompt));
    run += 1;
  }
  proxy.close();
  process.stdout.write(JSON.stringify({ runs, requests }) + '\n');
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ failure: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
