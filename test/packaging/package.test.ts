// The built package as a user gets it: `import 'sluice'` resolves through package.json
// "exports" to dist/, and the `sluice` bin runs.
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'

describe('package', () => {
  it('exports the engine from the built dist through its package name', async () => {
    const sluice = await import('sluice')
    const limiter = new sluice.Limiter({ policies: { algorithm: 'sliding-log', limit: 1, windowMs: 60_000 } })
    assert.equal((await limiter.limit('k')).allowed, true)
    assert.equal((await limiter.limit('k')).allowed, false)
    assert.equal(typeof sluice.MemoryStore, 'function')
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { exports: Record<string, { types: string }> }
    assert.ok(readFileSync(new URL(`../../${pkg.exports['.']?.types}`, import.meta.url), 'utf8').includes('export'))
  })

  it('exports the HTTP adapters as subpaths: sluice/node, sluice/express, sluice/fastify, sluice/koa, sluice/fetch', async () => {
    const node = await import('sluice/node')
    const web = await import('sluice/fetch')
    assert.equal(typeof (await import('sluice/express')).rateLimit, 'function')
    assert.equal(typeof (await import('sluice/fastify')).sluiceFastify, 'function')
    assert.equal(typeof (await import('sluice/koa')).rateLimit, 'function')
    assert.equal(typeof node.withRateLimit, 'function')
    assert.equal(typeof node.rateLimitNode, 'function')
    assert.equal(typeof web.withRateLimit, 'function')
    const limiter = web.rateLimitFetch({ rules: [{ policies: { algorithm: 'sliding-log', limit: 1, windowMs: 60_000 } }], onWarning: () => {} })
    assert.equal((await limiter.check(new Request('http://x/'), '203.0.113.9')).response, undefined)
    assert.equal((await limiter.check(new Request('http://x/'), '203.0.113.9')).response?.status, 429)
  })

  it('exports the client as sluice/client', async () => {
    const client = await import('sluice/client')
    assert.equal(typeof client.createClient().fetch, 'function')
    assert.equal(typeof client.createClient().interceptor(), 'function')
    assert.equal(client.readAnnouncement((name) => (name === 'retry-after' ? '3' : undefined), 0).retryAfterMs, 3000)
  })

  it('exports the middleware metrics as sluice/metrics', async () => {
    const { rateLimitMetrics } = await import('sluice/metrics')
    const { Registry } = await import('prom-client')
    const hooks = rateLimitMetrics({ registry: new Registry() })
    assert.deepEqual(Object.keys(hooks).sort(), ['observer', 'onDecision'])
  })

  it('exports the OpenTelemetry metrics as sluice/otel', async () => {
    const { rateLimitTelemetry } = await import('sluice/otel')
    const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
    const hooks = rateLimitTelemetry({ meter: new MeterProvider().getMeter('app') })
    assert.deepEqual(Object.keys(hooks).sort(), ['observer', 'onDecision'])
  })

  it('loads from CommonJS: require() of every entry point, and a CommonJS Express app limited by sluice/express', () => {
    // Many Express apps are still CommonJS. Node 20.19+ loads ES modules from require() when
    // "exports" offers them to it (the "default" condition); with "import" alone it refused.
    const script = `
      const express = require('express')
      const { Limiter } = require('sluice')
      const { rateLimit } = require('sluice/express')
      for (const entry of ['sluice/node', 'sluice/fastify', 'sluice/koa', 'sluice/fetch', 'sluice/client', 'sluice/metrics', 'sluice/otel']) if (Object.keys(require(entry)).length === 0) throw new Error(entry + ' is empty')
      if (typeof Limiter !== 'function') throw new Error('no Limiter')
      const app = express()
      app.use(rateLimit({ rules: [{ policies: { algorithm: 'sliding-log', limit: 2, windowMs: 60000 } }], onWarning: () => {} }))
      app.get('/', (req, res) => res.send('ok'))
      const server = app.listen(0, '127.0.0.1', async () => {
        const statuses = []
        for (let i = 0; i < 3; i++) statuses.push((await fetch('http://127.0.0.1:' + server.address().port + '/')).status)
        console.log(statuses.join(' '))
        server.close()
      })`
    const output = execFileSync(process.execPath, ['--input-type=commonjs', '-e', script], { cwd: new URL('../..', import.meta.url).pathname, encoding: 'utf8', timeout: 20_000 })
    assert.equal(output.trim(), '200 200 429')
  })

  it('types resolve for TypeScript projects on the older node10 resolution, which ignores "exports" (typesVersions)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-node10-'))
    try {
      mkdirSync(join(dir, 'node_modules'))
      symlinkSync(new URL('../..', import.meta.url).pathname, join(dir, 'node_modules', 'sluice'))
      writeFileSync(join(dir, 'app.ts'), [
        "import { Limiter } from 'sluice'",
        "import { withRateLimit } from 'sluice/node'",
        "import { rateLimit } from 'sluice/express'",
        "import { sluiceFastify } from 'sluice/fastify'",
        "import { rateLimit as koaRateLimit } from 'sluice/koa'",
        "import { rateLimitFetch } from 'sluice/fetch'",
        "import { createClient } from 'sluice/client'",
        "import { rateLimitMetrics } from 'sluice/metrics'",
        "import { rateLimitTelemetry } from 'sluice/otel'",
        "const limiter: Limiter = new Limiter({ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 } })",
        // A typed export, not `any`: a wrong option is an error the compiler names.
        "// @ts-expect-error the option is misspelt",
        "rateLimit({ rulez: [] })",
        'export const used = [limiter, withRateLimit, sluiceFastify, koaRateLimit, rateLimitFetch, createClient, rateLimitMetrics, rateLimitTelemetry]',
      ].join('\n'))
      const tsc = new URL('../../node_modules/typescript/bin/tsc', import.meta.url).pathname
      execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', '--module', 'commonjs', '--moduleResolution', 'node10', join(dir, 'app.ts')], { cwd: dir, encoding: 'utf8' })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('ships a sluice bin: version, check (exit 1 for a bad policy, malformed JSON included), demo, help COMMAND, and exit 2 on bad usage', () => {
    const bin = new URL('../../dist/cli/main.js', import.meta.url).pathname
    const run = (...args: string[]) => execFileSync(process.execPath, [bin, ...args], { encoding: 'utf8' })
    assert.match(run('version'), /^\d+\.\d+\.\d+/)
    assert.match(run('check', '{"algorithm":"fixed-window","limit":5,"windowMs":1000}'), /"name": "fixed-window:5\/1s"/)
    assert.match(run('demo'), /sliding-log:5\/1s/)
    assert.throws(() => run('check', '{"algorithm":"fixed-window","limit":0,"windowMs":1000}'), (e: { status: number; stdout: string }) => e.status === 1 && /limit must be a positive integer/.test(e.stdout))
    assert.throws(() => run('check', '{"algorithm":'), (e: { status: number; stdout: string }) => e.status === 1 && /not valid JSON/.test(e.stdout))
    // Every problem, not the first alone.
    assert.throws(() => run('check', '[{"algorithm":"fixed-window","limit":0,"windowMs":-1}]'), (e: { status: number; stdout: string }) => e.status === 1
      && e.stdout === 'sluice check: 2 problems\n  - [0] limit must be a positive integer (got 0)\n  - [0] windowMs must be a positive integer (got -1)\n')
    assert.throws(() => run('check'), (e: { status: number }) => e.status === 2)
    assert.throws(() => run(), (e: { status: number; stderr: string }) => e.status === 2 && /^sluice: expected a command\n\nusage: sluice <command>/.test(e.stderr))
    assert.throws(() => run('launch'), (e: { status: number; stderr: string }) => e.status === 2 && /unknown command "launch"\n/.test(e.stderr))
    assert.throws(() => run('check-confg', 'x.yaml'), (e: { status: number; stderr: string }) => e.status === 2 && /unknown command "check-confg"; did you mean "check-config"\?\n/.test(e.stderr))
    // help COMMAND prints the command's own usage, as COMMAND --help does; help of no command is bad usage.
    assert.equal(run('help', 'inspect'), run('inspect', '--help'))
    assert.match(run('help', 'demo'), /^usage: sluice <command>/)
    assert.throws(() => run('help', 'launch'), (e: { status: number; stderr: string }) => e.status === 2 && /unknown command "launch"/.test(e.stderr))
    assert.throws(() => run('version', 'extra'), (e: { status: number; stderr: string }) => e.status === 2 && /version takes no arguments/.test(e.stderr))
  })

  it('ends quietly, as a Unix tool ends on SIGPIPE (status 141), when the reader of its output stops reading (| head)', async () => {
    const bin = new URL('../../dist/cli/main.js', import.meta.url).pathname
    const child = spawn(process.execPath, [bin, 'simulate', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] })
    // The reading end closed before the command writes: its first write finds no reader.
    child.stdout.destroy()
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8') })
    const [code] = (await once(child, 'close')) as [number | null]
    assert.equal(stderr, '')
    assert.equal(code, 141)
  })

  it('runs through a symlink, as npm installs bins (node_modules/.bin/sluice)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-bin-'))
    try {
      const link = join(dir, 'sluice')
      symlinkSync(new URL('../../dist/cli/main.js', import.meta.url).pathname, link)
      assert.match(execFileSync(process.execPath, [link, 'version'], { encoding: 'utf8' }), /^\d+\.\d+\.\d+/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
