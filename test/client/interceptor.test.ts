import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, it } from 'node:test'
import { Agent, fetch as undiciFetch, request } from 'undici'
import { createClient } from '../../src/client/index.ts'
import { nextWindow, refusalsAfterFirstWindow, startLimitedServer } from './servers.ts'

describe('the client as an undici interceptor', () => {
  it('undici.request at 10x the allowed rate: at most one 429 per window after the first, every request completes', async (t) => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 50 })
    const agent = new Agent().compose(createClient().interceptor())
    try {
      await nextWindow()
      const pending: Array<Promise<number>> = []
      for (let i = 0; i < 300; i++) {
        pending.push(request(`${server.url}/items/${i}`, { dispatcher: agent }).then(async (response) => {
          assert.equal(await response.body.text(), response.statusCode === 200 ? 'ok' : 'slow down')
          return response.statusCode
        }))
        await new Promise((resolve) => setTimeout(resolve, 2))
      }
      const statuses = await Promise.all(pending)
      const perWindow = refusalsAfterFirstWindow(server)
      t.diagnostic(`undici interceptor: ${server.refused} x 429 (${perWindow.join(' ')} per window after the first)`)
      assert.deepEqual(statuses.filter((status) => status !== 200), [])
      assert.ok(perWindow.every((refusals) => refusals <= 1))
    } finally {
      await agent.close()
      await server.close()
    }
  })

  it('retries a refused request after Retry-After, replaying its body, and hands the final response to the caller', async () => {
    const bodies: string[] = []
    let calls = 0
    const server = createServer((req, res) => {
      let body = ''
      req.on('data', (chunk: Buffer) => { body += chunk.toString() })
      req.on('end', () => {
        bodies.push(body)
        calls++
        if (calls === 1) {
          res.writeHead(429, { 'Retry-After': '1' })
          res.end('refused body the caller never sees')
        } else {
          res.end(`ok ${body}`)
        }
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const agent = new Agent().compose(createClient().interceptor())
    try {
      const started = Date.now()
      const response = await request(url, { method: 'PUT', body: 'payload', dispatcher: agent })
      assert.equal(response.statusCode, 200)
      assert.equal(await response.body.text(), 'ok payload')
      assert.ok(Date.now() - started >= 1000)
      assert.deepEqual(bodies, ['payload', 'payload'])
      // undici's fetch goes through the same dispatcher.
      const fetched = await undiciFetch(url, { dispatcher: agent })
      assert.equal(fetched.status, 200)
    } finally {
      await agent.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it('an abort while waiting rejects the request at once', async () => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 1, windowSeconds: 60 })
    const agent = new Agent().compose(createClient().interceptor())
    try {
      assert.equal((await request(server.url, { dispatcher: agent })).statusCode, 200)
      const controller = new AbortController()
      const waiting = request(server.url, { dispatcher: agent, signal: controller.signal })
      await new Promise((resolve) => setTimeout(resolve, 50))
      const abortedAt = performance.now()
      controller.abort()
      await assert.rejects(waiting, { name: 'AbortError' })
      // The wait it cut short was a minute; a bound far below that, far above a busy CI machine's pauses.
      assert.ok(performance.now() - abortedAt < 2000, 'rejected promptly')
      assert.equal(server.arrivals.length, 1)
    } finally {
      await agent.close()
      await server.close()
    }
  })
})
