/**
 * A process of its own for a rediss:// store, since Node reads NODE_EXTRA_CA_CERTS
 * when it starts: decides two calls on a limit of one, and prints what they were
 * and what a ping of the store said.
 */
import { Limiter, RedisStore } from '../../src/index.ts'

const store = new RedisStore({ url: process.argv[2] as string })
const limiter = new Limiter({ store, policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }, onStoreFailure: 'closed' })
const decisions = [await limiter.limit('k'), await limiter.limit('k')].map((d) => ({ allowed: d.allowed, degraded: d.degraded }))
const ping = await store.ping().then(() => 'ok', (error: unknown) => (error as Error).message)
await store.close()
console.log(JSON.stringify({ decisions, ping }))
