/**
 * One server under test for bench/http.ts, in its own process: a framework, bare
 * or with a rate limiter, answering "ok". Prints its port on stdout.
 */
import type { AddressInfo } from 'node:net'
import { createServer } from 'node:http'
import { Redis } from 'ioredis'
import express from 'express'
import Fastify from 'fastify'
import { rateLimit as expressRateLimit } from 'express-rate-limit'
import fastifyRateLimit from '@fastify/rate-limit'
import Koa from 'koa'
import koaRateLimit from 'koa-ratelimit'
import { RedisStore as ExpressRateLimitRedisStore, type RedisReply } from 'rate-limit-redis'
import { RedisStore, type Store } from 'sluice'
import { rateLimit } from 'sluice/express'
import { sluiceFastify } from 'sluice/fastify'
import { rateLimit as koaSluice } from 'sluice/koa'

const [framework, limiter, redisUrl] = process.argv.slice(2) as [string, string, string | undefined]
const HUGE = 1_000_000_000
// Per client IP, one minute, never reached: the cost of deciding, not of refusing.
const rules = [{ name: 'api', policies: { algorithm: 'fixed-window' as const, limit: HUGE, windowMs: 60_000, name: 'api' } }]
const redisStore = limiter.startsWith('sluice-redis')
  ? new RedisStore({ client: new Redis(redisUrl as string, { autoResendUnfulfilledCommands: false }), functions: limiter === 'sluice-redis-fn' })
  : undefined
// bench/keys.ts: the same store, hiding that one call spans keys, so that the two keys' rules are a call each.
const store: Store | undefined = redisStore !== undefined && limiter === 'sluice-redis-keys-apart'
  ? { consume: (call) => redisStore.consume(call), reset: (prefix, key, policies) => redisStore.reset(prefix, key, policies) }
  : redisStore
// The least a limiter that answers with draft-10 fields does, deciding nothing: two fields per
// response, one of them with a number that changes, as sluice sends for this rule.
let served = 0
const policyField = '"api";q=1000000000;w=60'
const remainingField = () => `"api";r=${HUGE - ++served};t=60`
// bench/keys.ts: per client IP AND per user (one user: the cost of a second key, not of many), never reached.
const twoKeys = limiter.startsWith('sluice-redis-keys') || limiter === 'peer-redis-keys'
const userRule = { name: 'user', key: () => 'user:42', policies: { algorithm: 'fixed-window' as const, limit: HUGE, windowMs: 60_000, name: 'user' } }
const sluiceOptions = { rules: twoKeys ? [...rules, userRule] : rules, onWarning: () => {}, ...(store ? { store } : {}) }
// The peers on the same Redis, each with its own store: rate-limit-redis for express-rate-limit, the built-in one for @fastify/rate-limit and koa-ratelimit.
const peerRedis = limiter === 'peer-redis' || limiter === 'peer-redis-keys' ? new Redis(redisUrl as string) : undefined

if (framework === 'express') {
  const app = express()
  if (limiter.startsWith('sluice-')) app.use(rateLimit(sluiceOptions))
  // The floor any middleware pays: one more layer that calls next().
  if (limiter === 'noop') app.use((_req, _res, next) => { next() })
  if (limiter === 'fields') app.use((_req, res, next) => { res.setHeader('RateLimit-Policy', policyField); res.setHeader('RateLimit', remainingField()); next() })
  if (limiter === 'peer') app.use(expressRateLimit({ windowMs: 60_000, limit: HUGE, standardHeaders: 'draft-8', legacyHeaders: false }))
  if (peerRedis) {
    const peerStore = (prefix: string) => new ExpressRateLimitRedisStore({ prefix, sendCommand: (command: string, ...args: string[]) => peerRedis.call(command, ...args) as Promise<RedisReply> })
    app.use(expressRateLimit({ windowMs: 60_000, limit: HUGE, standardHeaders: 'draft-8', legacyHeaders: false, store: peerStore('rl:') }))
    // Its way to a second key: a second middleware, with a store and a round trip of its own.
    if (twoKeys) app.use(expressRateLimit({ windowMs: 60_000, limit: HUGE, standardHeaders: 'draft-8', legacyHeaders: false, store: peerStore('rl-user:'), keyGenerator: () => 'user:42' }))
  }
  app.get('/', (_req, res) => { res.send('ok') })
  const server = createServer(app).listen(0, '127.0.0.1', () => console.log((server.address() as AddressInfo).port))
} else if (framework === 'koa') {
  const app = new Koa()
  if (limiter.startsWith('sluice-')) app.use(koaSluice(sluiceOptions))
  // The floor any middleware pays: one more layer that awaits next().
  if (limiter === 'noop') app.use(async (_ctx, next) => { await next() })
  if (limiter === 'fields') app.use(async (ctx, next) => { ctx.set('RateLimit-Policy', policyField); ctx.set('RateLimit', remainingField()); await next() })
  // koa-ratelimit's drivers: a Map in memory, or Redis (a sorted set per client). Its three X-RateLimit-* fields are on by default.
  if (limiter === 'peer') app.use(koaRateLimit({ driver: 'memory', db: new Map(), duration: 60_000, max: HUGE }))
  if (peerRedis) app.use(koaRateLimit({ driver: 'redis', db: peerRedis, duration: 60_000, max: HUGE }))
  app.use((ctx) => { ctx.body = 'ok' })
  const server = createServer(app.callback()).listen(0, '127.0.0.1', () => console.log((server.address() as AddressInfo).port))
} else {
  const app = Fastify({ logger: false })
  if (limiter.startsWith('sluice-')) await app.register(sluiceFastify, sluiceOptions)
  // The floor any limiter that may await a store pays: one async onRequest hook.
  if (limiter === 'noop') app.addHook('onRequest', async () => {})
  if (limiter === 'fields') app.addHook('onRequest', (_request, reply, done) => { reply.header('ratelimit-policy', policyField); reply.header('ratelimit', remainingField()); done() })
  if (limiter === 'peer') await app.register(fastifyRateLimit, { max: HUGE, timeWindow: 60_000 })
  if (peerRedis) await app.register(fastifyRateLimit, { max: HUGE, timeWindow: 60_000, redis: peerRedis })
  app.get('/', async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  console.log((app.server.address() as AddressInfo).port)
}
process.on('SIGTERM', () => process.exit(0))
