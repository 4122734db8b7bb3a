// The chat page at / in headless Chromium (playwright-core driving the system's /usr/bin/chromium;
// no browser is downloaded). OKAPI_CHROMIUM overrides the browser path.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer, waitSlotsIdle } from './support.mjs';

const CHROMIUM = process.env.OKAPI_CHROMIUM || '/usr/bin/chromium';
const API_KEY = 'page-test-key';
const auth = { Authorization: `Bearer ${API_KEY}` };
let server;
let browser;
let page;
const consoleErrors = [];
// While a step provokes an HTTP error on purpose (Chromium logs each 4xx load on the console): the
// page's first /v1/models without an API key is such a 401.
let expectErrors = true;
const chatRequests = [];

before(async () => {
  assert.ok(existsSync(CHROMIUM), `Chromium at ${CHROMIUM} (apt-get install chromium, or set OKAPI_CHROMIUM)`);
  server = await startServer(['--api-key', API_KEY, '--alias', 'tiny-stories'], { ctx: 1024, slots: 2 });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  const context = await browser.newContext();
  page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.on('console', (m) => {
    if (m.type() === 'error' && !expectErrors) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions') && r.method() === 'POST') chatRequests.push(r.postDataJSON());
  });
  await page.goto(`${server.base}/`);
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

const assistantBubbles = () => page.locator('[data-testid="message-assistant"]');
const userBubbles = () => page.locator('[data-testid="message-user"]');

async function openSettings() {
  if (await page.getByTestId('settings').isHidden()) await page.getByTestId('toggle-settings').click();
}

async function sendAndWait(text) {
  const before = await assistantBubbles().count();
  await page.getByTestId('input').fill(text);
  await page.getByTestId('input').press('Enter');
  await assistantBubbles().nth(before).locator('.content').filter({ hasText: /\S/ }).waitFor({ timeout: 15_000 });
  await page.waitForFunction(() => document.body.dataset.busy === 'false', null, { timeout: 15_000 });
  return assistantBubbles().nth(before);
}

describe('chat page', () => {
  test('loads without errors and asks for the API key', async () => {
    assert.equal(await page.title(), 'okapi chat');
    await page.getByText('API key needed').waitFor({ timeout: 5000 });
    expectErrors = false;
    assert.equal(await page.getByTestId('stop').isDisabled(), true);
    assert.equal(await page.getByTestId('send').isEnabled(), true);
  });

  test('a 401 shows the server error message and keeps the text to resend', async () => {
    expectErrors = true;  // Chromium logs the failed (401) resource load on the console
    try {
      await page.getByTestId('input').fill('Hello without a key');
      await page.getByTestId('send').click();
      const error = page.getByTestId('error');
      await error.waitFor({ state: 'visible', timeout: 5000 });
      assert.match(await error.textContent(), /^Error 401/);
      assert.equal(await userBubbles().count(), 0, 'the failed turn is taken out');
      assert.equal(await page.getByTestId('input').inputValue(), 'Hello without a key');
    } finally {
      expectErrors = false;
    }
  });

  test('the API key is kept in localStorage and used', async () => {
    await openSettings();
    await page.getByTestId('api-key').fill(API_KEY);
    await page.getByTestId('api-key').press('Tab');  // change event
    await page.getByTestId('max-tokens').fill('24');
    await page.getByTestId('max-tokens').press('Tab');
    await page.reload();
    assert.equal(await page.getByTestId('api-key').inputValue(), API_KEY);
    await page.getByTestId('model').filter({ hasText: 'tiny-stories' }).waitFor({ timeout: 5000 });
    assert.equal(await page.title(), 'okapi · tiny-stories');
  });

  test('sends on Enter, streams the reply and shows the speed', async () => {
    const bubble = await sendAndWait('Tell me a story about a cat.');
    assert.equal(await userBubbles().first().textContent(), 'Tell me a story about a cat.');
    const text = await bubble.locator('.content').textContent();
    assert.ok(text.trim().length > 0);
    const stats = await page.getByTestId('stats').textContent();
    assert.match(stats, /prompt: \d+ tok, [\d.]+ tok\/s · generation: \d+ tok, [\d.]+ tok\/s/);
    assert.match(stats, /finish: (stop|length)/);
    assert.equal(await page.getByTestId('error').isHidden(), true);
    const req = chatRequests.at(-1);
    assert.equal(req.stream, true);
    assert.equal(req.max_tokens, 24);
    assert.deepEqual(req.messages, [{ role: 'user', content: 'Tell me a story about a cat.' }]);
  });

  test('keeps the conversation for the next turn, with the system prompt', async () => {
    await openSettings();
    await page.getByTestId('system-prompt').fill('You tell short stories.');
    await page.getByTestId('system-prompt').press('Tab');
    const first = await assistantBubbles().first().locator('.content').textContent();
    await sendAndWait('And then?');
    const req = chatRequests.at(-1);
    assert.deepEqual(req.messages, [
      { role: 'system', content: 'You tell short stories.' },
      { role: 'user', content: 'Tell me a story about a cat.' },
      { role: 'assistant', content: first },
      { role: 'user', content: 'And then?' },
    ]);
    assert.equal(await assistantBubbles().count(), 2);
  });

  test('Stop ends a long generation; the server frees the slot', async () => {
    await openSettings();
    await page.getByTestId('max-tokens').fill('400');
    await page.getByTestId('extra').fill('{"ignore_eos": true}');
    // Slow the page's network so that the stream is still running when Stop is clicked.
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false, latency: 20, downloadThroughput: 4000, uploadThroughput: -1,
    });
    try {
      const before = await assistantBubbles().count();
      await page.getByTestId('input').fill('Tell me a very long story.');
      await page.getByTestId('send').click();
      const bubble = assistantBubbles().nth(before);
      await bubble.locator('.content').filter({ hasText: /\S/ }).waitFor({ timeout: 15_000 });
      assert.equal(await page.getByTestId('stop').isEnabled(), true, 'Stop is enabled while streaming');
      await page.getByTestId('stop').click();
      await page.waitForFunction(() => document.body.dataset.busy === 'false', null, { timeout: 5000 });
      assert.equal(await bubble.locator('.note').textContent(), '(stopped)');
      assert.equal(await page.getByTestId('stop').isDisabled(), true);
      assert.equal(await page.getByTestId('error').isHidden(), true);
    } finally {
      await cdp.send('Network.emulateNetworkConditions', {
        offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1,
      });
      await cdp.detach();
    }
    await waitSlotsIdle(server.base, { timeoutMs: 5000, headers: auth });
    // The page still works after a stop.
    await page.getByTestId('max-tokens').fill('8');
    await page.getByTestId('extra').fill('');
    await sendAndWait('One more.');
  });

  test('model text is rendered as text, never as HTML', async () => {
    const evil = '<img src=x onerror="window.__pwned=1"><b>bold</b>';
    await page.route('**/v1/chat/completions', (route) => route.fulfill({
      status: 200, contentType: 'text/event-stream',
      body: [
        { choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
        { choices: [{ index: 0, delta: { content: evil }, finish_reason: null }] },
        { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
          timings: { prompt_n: 1, prompt_per_second: 1, predicted_n: 1, predicted_per_second: 1, cache_n: 0 } },
      ].map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n',
    }));
    try {
      const bubble = await sendAndWait('Say something nasty.');
      assert.equal(await bubble.locator('.content').textContent(), evil);
      assert.equal(await page.locator('#messages img, #messages b').count(), 0);
      assert.equal(await page.evaluate(() => window.__pwned), undefined);
    } finally {
      await page.unroute('**/v1/chat/completions');
    }
  });

  test('an error inside the stream and a 400 are shown', async () => {
    await openSettings();
    await page.getByTestId('extra').fill('{"top_p": 5}');
    expectErrors = true;
    try {
      await page.getByTestId('input').fill('Bad settings');
      await page.getByTestId('input').press('Enter');
      const error = page.getByTestId('error');
      await error.waitFor({ state: 'visible', timeout: 5000 });
      assert.match(await error.textContent(), /^Error 400.*top_p/);
    } finally {
      expectErrors = false;
      await page.getByTestId('extra').fill('');
    }
    await page.getByTestId('extra').fill('[1]');
    await page.getByTestId('send').click();
    assert.match(await page.getByTestId('error').textContent(), /JSON object/);
    await page.getByTestId('extra').fill('');
  });

  test('New chat clears the conversation', async () => {
    await page.getByTestId('new-chat').click();
    assert.equal(await assistantBubbles().count(), 0);
    assert.equal(await userBubbles().count(), 0);
    await sendAndWait('Hello again.');
    assert.equal(chatRequests.at(-1).messages.filter((m) => m.role !== 'system').length, 1);
  });

  test('no console errors', () => {
    assert.deepEqual(consoleErrors, []);
  });
});
