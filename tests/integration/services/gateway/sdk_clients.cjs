// Drives the gateway with the official OpenAI and Anthropic npm clients.
//
//   node sdk_clients.cjs NODE_MODULES_DIR BASE_URL
//
// The gateway runs against the scripted fake daemon of gateway_sdk_test.cc: a user message
// containing "tool" gets a streamed tool call (read_file {"path":"a.txt"}) with reasoning,
// "busy" gets RESOURCE_EXHAUSTED, "too long" a context overflow after a silent wait (the
// stream has begun with pings), anything else "Hello world". Prints one line per case and
// exits non-zero on the first failure.
'use strict';

const assert = require('assert');
const {createRequire} = require('module');

const [modulesDir, baseUrl] = process.argv.slice(2);
const load = createRequire(modulesDir.replace(/\/?$/, '/'));
const OpenAI = load('openai').OpenAI;
const Anthropic = load('@anthropic-ai/sdk').Anthropic;

const openai = new OpenAI({baseURL: `${baseUrl}/v1`, apiKey: 'test-key', maxRetries: 0});
const anthropic = new Anthropic({baseURL: baseUrl, apiKey: 'test-key', maxRetries: 0});

const readFileTool = {
  type: 'function',
  function: {
    name: 'read_file',
    description: 'Reads a file',
    parameters: {type: 'object', properties: {path: {type: 'string'}}, required: ['path']},
  },
};

const cases = {
  async openaiChat() {
    const r = await openai.chat.completions.create(
        {model: 'fake-model', messages: [{role: 'user', content: 'hi'}]});
    assert.strictEqual(r.choices[0].message.content, 'Hello world');
    assert.strictEqual(r.choices[0].finish_reason, 'stop');
    assert.strictEqual(r.usage.prompt_tokens_details.cached_tokens, 8);
    assert.strictEqual(r.cairn.tier, 'ram');
  },

  async openaiChatStream() {
    const stream = await openai.chat.completions.create({
      model: 'fake-model',
      stream: true,
      stream_options: {include_usage: true},
      messages: [{role: 'user', content: 'hi'}],
    });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices.length > 0) text += chunk.choices[0].delta.content || '';
    }
    assert.strictEqual(text, 'Hello world');
    assert.strictEqual(usage.prompt_tokens_details.cached_tokens, 8);
  },

  async openaiToolCallStream() {
    // The SDK's stream helper accumulates tool-call deltas into the final message.
    const stream = openai.chat.completions.stream({
      model: 'fake-model',
      messages: [{role: 'user', content: 'use a tool'}],
      tools: [readFileTool],
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    const done = await stream.finalChatCompletion();
    const message = done.choices[0].message;
    assert.strictEqual(done.choices[0].finish_reason, 'tool_calls');
    assert.strictEqual(message.tool_calls.length, 1);
    assert.match(message.tool_calls[0].id, /^call_[0-9a-f]{24}$/);  // Ours, not the daemon's.
    assert.strictEqual(message.tool_calls[0].function.name, 'read_file');
    assert.deepStrictEqual(JSON.parse(message.tool_calls[0].function.arguments), {path: 'a.txt'});
    assert.strictEqual(message.reasoning_content, 'I should look');
  },

  async openaiCompletionTokenIds() {
    const r = await openai.completions.create({model: 'fake-model', prompt: [1, 2, 3], max_tokens: 4});
    assert.strictEqual(r.choices[0].text, 'Hello world');
  },

  async openaiErrors() {
    await assert.rejects(
        openai.chat.completions.create(
            {model: 'fake-model', n: 2, messages: [{role: 'user', content: 'hi'}]}),
        (e) => e instanceof OpenAI.BadRequestError && /n must be 1/.test(e.message));
    await assert.rejects(
        openai.chat.completions.create({model: 'fake-model', messages: [{role: 'user', content: 'busy'}]}),
        (e) => e instanceof OpenAI.RateLimitError && e.headers.get('retry-after') === '1');
  },

  async openaiModels() {
    const models = [];
    for await (const m of openai.models.list()) models.push(m.id);
    assert.deepStrictEqual(models, ['fake-model']);
  },

  async openaiResponsesStream() {
    const stream = openai.responses.stream({
      model: 'fake-model',
      input: [{role: 'user', content: 'use a tool'}],
      tools: [{type: 'function', name: 'read_file', parameters: readFileTool.function.parameters,
                strict: false}],
      store: false,
    });
    const r = await stream.finalResponse();
    const call = r.output.find((item) => item.type === 'function_call');
    assert.strictEqual(call.name, 'read_file');
    assert.strictEqual(call.arguments, '{"path":"a.txt"}');
    assert.strictEqual(r.usage.input_tokens_details.cached_tokens, 8);
  },

  // The daemon refuses the prompt after the gateway has begun the stream with pings: the
  // client still gets the failed response and its code, not a protocol error.
  async openaiResponsesStreamFailingAfterPings() {
    const stream = openai.responses.stream(
        {model: 'fake-model', input: 'a prompt too long', store: false});
    const r = await stream.finalResponse();
    assert.strictEqual(r.status, 'failed');
    assert.strictEqual(r.error.code, 'context_length_exceeded');
  },

  async anthropicMessage() {
    const r = await anthropic.messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      system: 'You are terse.',
      messages: [{role: 'user', content: 'hi'}],
    });
    assert.strictEqual(r.content[0].type, 'text');
    assert.strictEqual(r.content[0].text, 'Hello world');
    assert.strictEqual(r.stop_reason, 'end_turn');
    assert.strictEqual(r.usage.cache_read_input_tokens, 8);
  },

  async anthropicToolStream() {
    const stream = anthropic.messages.stream({
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      messages: [{role: 'user', content: 'use a tool'}],
      tools: [{name: 'read_file', description: 'Reads a file', input_schema: {type: 'object'}}],
      thinking: {type: 'enabled', budget_tokens: 1024},
    });
    const m = await stream.finalMessage();
    assert.strictEqual(m.stop_reason, 'tool_use');
    const thinking = m.content.find((b) => b.type === 'thinking');
    assert.strictEqual(thinking.thinking, 'I should look');
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.strictEqual(use.name, 'read_file');
    assert.deepStrictEqual(use.input, {path: 'a.txt'});
  },

  async anthropicCountTokens() {
    const r = await anthropic.messages.countTokens(
        {model: 'claude-sonnet-4-5', messages: [{role: 'user', content: 'U'}]});
    assert.ok(r.input_tokens > 0);
  },

  async anthropicErrors() {
    await assert.rejects(
        anthropic.messages.create({
          model: 'x',
          max_tokens: 5,
          messages: [{role: 'user', content: [{type: 'image', source: {type: 'url', url: 'x'}}]}],
        }),
        (e) => e instanceof Anthropic.BadRequestError && /media/.test(e.message));
  },
};

(async () => {
  for (const [name, run] of Object.entries(cases)) {
    try {
      await run();
      console.log(`ok ${name}`);
    } catch (e) {
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      process.exit(1);
    }
  }
})();
