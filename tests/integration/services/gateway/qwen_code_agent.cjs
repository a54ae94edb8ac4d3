// Runs the qwen-code CLI (non-interactive `-p`, OpenAI auth) against a gateway through a
// recording proxy, once per prompt, and prints one JSON object: each run's exit code and each
// request's prompt size and cache use, plus the token count of the agent's system prompt and
// tool definitions (through the gateway's Anthropic count_tokens, with and without them).
//
//   node qwen_code_agent.cjs GATEWAY_URL CLI_JS WORK_DIR HOME_DIR PROMPT...
//
// Only Node.js built-ins; no network beyond 127.0.0.1.
'use strict';
const http = require('node:http');
const { spawn } = require('node:child_process');

const [gateway, cli, workDir, homeDir, ...prompts] = process.argv.slice(2);
// Longest one agent run may take (the first prefills the agent's ~12K-token prompt cold).
const RUN_TIMEOUT_MS = 400 * 1000;
const upstream = new URL(gateway);
const requests = [];
let run = 0;

// The proxy: forwards every request unchanged and remembers what it carried.
const proxy = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const record = { run, path: req.url };
    try {
      const parsed = JSON.parse(body.toString());
      const system = (parsed.messages || []).find((m) => m.role === 'system');
      record.system = system ? system.content : null;
      record.tools = parsed.tools || [];
      record.messages = (parsed.messages || []).length;
      record.stream = !!parsed.stream;
    } catch (e) {
      record.unparsed = true;
    }
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
          // The usage and the cairn object: in the body, or in the stream's last chunks.
          for (const piece of [text, ...text.split('\n')].reverse()) {
            const json = piece.startsWith('data: ') ? piece.slice(6) : piece;
            try {
              const obj = JSON.parse(json);
              if (obj.usage && record.usage === undefined) record.usage = obj.usage;
              if (obj.cairn && record.cairn === undefined) record.cairn = obj.cairn;
              if (obj.choices && obj.choices[0] && obj.choices[0].finish_reason &&
                  record.finish === undefined) {
                record.finish = obj.choices[0].finish_reason;
              }
            } catch (e) { /* not JSON */ }
          }
        });
      });
    up.on('error', (e) => { record.error = String(e); res.destroy(); });
    up.end(body);
  });
});

function runAgent(prompt) {
  return new Promise((resolve) => {
    const port = proxy.address().port;
    const child = spawn(process.execPath, [cli, '-p', prompt, '--auth-type', 'openai'], {
      cwd: workDir,
      env: { PATH: process.env.PATH, HOME: homeDir, TERM: 'dumb', NO_COLOR: '1',
             OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, OPENAI_API_KEY: 'local-test-key',
             OPENAI_MODEL: 'demo' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c) => { out += c.toString(); });
    child.stderr.on('data', (c) => { out += c.toString(); });
    // Every run is bounded: a hung agent is killed and reported with code null.
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output: out.slice(-2000) });
    });
  });
}

function post(path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: upstream.hostname, port: upstream.port, path, method: 'POST',
        headers: { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.on('data', (c) => { text += c.toString(); });
        res.on('end', () => {
          try { resolve(JSON.parse(text)); } catch (e) { reject(new Error(text)); }
        });
      });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

// Tokens of the system turn with the tools: the difference of two counts through the model's
// chat template, with and without them.
async function systemAndToolsTokens(record) {
  const messages = [{ role: 'user', content: 'x' }];
  const tools = record.tools.map((t) => ({
    name: t.function.name, description: t.function.description || '',
    input_schema: t.function.parameters || { type: 'object' },
  }));
  const whole = await post('/v1/messages/count_tokens',
                           { model: 'demo', system: record.system, tools, messages });
  const bare = await post('/v1/messages/count_tokens', { model: 'demo', messages });
  return whole.input_tokens - bare.input_tokens;
}

async function main() {
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const runs = [];
  for (const prompt of prompts) {
    runs.push(await runAgent(prompt));
    run += 1;
  }
  proxy.close();
  const first = requests.find((r) => r.system && r.tools.length > 0);
  const prefixTokens = first ? await systemAndToolsTokens(first) : 0;
  const summary = {
    runs,
    system_chars: first ? first.system.length : 0,
    tools_chars: first ? JSON.stringify(first.tools).length : 0,
    system_and_tools_tokens: prefixTokens,
    requests: requests.map((r) => ({
      run: r.run, path: r.path, status: r.status, stream: r.stream, messages: r.messages,
      same_system: first !== undefined && r.system === first.system &&
                   JSON.stringify(r.tools) === JSON.stringify(first.tools),
      prompt_tokens: r.usage ? r.usage.prompt_tokens : -1,
      cached_tokens: r.usage && r.usage.prompt_tokens_details ?
                     r.usage.prompt_tokens_details.cached_tokens : -1,
      tier: r.cairn ? r.cairn.tier : null,
      ttft_ms: r.cairn ? r.cairn.ttft_ms : null,
      finish: r.finish, error: r.error,
    })),
  };
  process.stdout.write(JSON.stringify(summary) + '\n');
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
