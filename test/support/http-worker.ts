/**
 * A separate HTTP server process for multi-process tests: a node:http server
 * with the sluice node adapter on a RedisStore; it reports its port over IPC.
 * `/` is under a rate limit, `/slow` under a concurrency limit.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Redis } from 'ioredis'
import { RedisStore, type Policy } from '../../src/index.ts'
import { withRateLimit } from '../../src/http/adapters/node.ts'

const { url, prefix, policy } = JSON.parse(process.env.SLUICE_HTTP_WORKER ?? '{}') as { url: string; prefix: string; policy: Policy }
const redis = new Redis(url, { maxRetriesPerRequest: 1 })
const server = createServer(withRateLimit((req, res) => {
  // /slow stays in progress a while (500 ms, or x-hold-ms), for the concurrency limit: its head at
  // once, so a client knows it was admitted, and its body's end then, which ends the request.
  if (req.url === '/slow') {
    res.writeHead(200)
    res.flushHeaders()
    setTimeout(() => res.end(`ok from ${process.pid}`), Number(req.headers['x-hold-ms'] ?? 500))
  } else {
    res.end(`ok from ${process.pid}`)
  }
}, {
  rules: [
    { name: 'shared', match: { path: '/' }, policies: policy },
    { name: 'in-progress', match: { path: '/slow' }, count: 'in-flight', policies: { algorithm: 'sliding-log', name: 'in-progress', limit: 4, windowMs: 3_600_000 } },
  ],
  store: new RedisStore({ client: redis }),
  // Exact sharing is the point: a busy CI machine must not turn a slow Redis call into a local decision.
  storeTimeoutMs: 10_000,
  prefix,
  onWarning: () => {},
}))
server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as AddressInfo).port }))
process.on('message', (message) => {
  if (message === 'exit') {
    server.closeAllConnections()
    server.close(() => { redis.disconnect(); process.exit(0) })
  }
})
