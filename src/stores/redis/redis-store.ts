/**
 * Redis store: every decision is one atomic EVALSHA of lua/limit.lua (or FCALL
 * of the same code loaded as a function, with `functions: true`), which
 * mirrors the TypeScript algorithms and writes every policy of the call or
 * none. "Now" is the Redis server's clock unless the limiter injects one.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { monotonicClock } from '../../core/clock.ts'
import { warningTo } from '../../core/callbacks.ts'
import { ArgumentError, SluiceError, StoreNotAppliedError } from '../../core/errors.ts'
import { checkChoice, rejectUnknown } from '../../core/options.ts'
import { limitOf } from '../../core/policy.ts'
import type { PolicyDecision, ResolvedPolicy } from '../../core/types.ts'
import { spans, type Store, type StoreCall } from '../store.ts'
import { asStoreFailure, resendsAfterReconnect, runnerFor, selectRefusal, trackConnectionErrors, type RedisClient, type RunnerOptions, type ScriptRunner } from './clients.ts'
import { isRedisClient } from './detect.ts'
import { redisUrlProblem } from './url.ts'

export type { RedisClient, IoredisClient, NodeRedisClient } from './clients.ts'

export interface RedisStoreOptions {
  /**
   * A client you own: ioredis `Redis` (standalone or Sentinel) or `Cluster`, or a
   * node-redis client or cluster. sluice never closes it. Configure it as a
   * limiter needs: with ioredis, `autoResendUnfulfilledCommands: false` (else a
   * decision in flight during a reconnect can be charged twice) and a
   * `commandTimeout`; a bounded offline queue (`enableOfflineQueue: false`).
   */
  client?: RedisClient
  /**
   * Or a Redis URL: the store opens an ioredis connection configured for a
   * limiter (no offline queue, no re-sent scripts, 1 s command timeout) and
   * closes it on `close()`.
   */
  url?: string
  /**
   * Where "now" comes from when the limiter has no clock. `server` (default):
   * Redis `TIME`, so app servers' clocks cannot disagree. Where the server
   * refuses `TIME` in scripts (some managed offerings), the store warns once and
   * uses `client` time: this process's clock, exposed to skew between servers.
   */
  time?: 'server' | 'client'
  /**
   * Run the limit as a Redis function (`FCALL`, Redis 7+) instead of a script
   * (`EVALSHA`). Default false. The decisions are the same; Redis spends about
   * 3.5 µs less on each call, for it no longer runs the script's definitions every
   * time (see script.ts). The store loads its library (`sluice_limit_<hash>`, one per sluice
   * version) with `FUNCTION LOAD` on first need, on every primary of a cluster,
   * and again where a node has lost it; until then, and on a Redis or an ACL
   * user without functions (it warns once), each call runs as a script.
   */
  functions?: boolean
  /** Receives warnings. Default: `process.emitWarning`. */
  onWarning?: (message: string) => void
}

const OPTIONS = new Set(['client', 'url', 'time', 'functions', 'onWarning'])
/** remaining, resetAfterMs, verdict, moreAfterMs (see lua/limit.lua) */
const FIELDS_PER_POLICY = 4
/** Most calls decided by one script invocation. */
const MAX_BATCH = 128
/**
 * Queued calls are split over about this many invocations, sent back to back:
 * one big batch would leave Redis idle while Node reads its replies, and Node
 * idle while Redis runs it; a few in flight keep both busy (measured with
 * bench/redis.ts: 4 beat both 1 and 8 at 16, 64 and 256 calls in flight).
 */
const BATCHES_IN_FLIGHT = 4
/**
 * A Cluster moving a hash slot to another master (resharding) refuses a
 * script (or a reset's DEL) whose keys are some here, some there or not yet
 * anywhere (a call's block key, a batch of many callers) with TRYAGAIN, until
 * the slot's last key has moved: a few milliseconds per slot. Such a command
 * ran nothing, and is sent again after a pause that starts at
 * TRY_AGAIN_FIRST_PAUSE_MS and doubles, for TRY_AGAIN_FOR_MS in all: less
 * than the limiter's default store timeout (250 ms), so a caller that gets a
 * degraded decision meanwhile is not charged by a later try. (ioredis retries
 * TRYAGAIN itself, every `retryDelayOnTryAgain`, 100 ms by default;
 * node-redis does not.)
 */
const TRY_AGAIN_FIRST_PAUSE_MS = 2
const TRY_AGAIN_FOR_MS = 200

/** How many calls go in each script invocation when `queued` calls wait together. */
export function batchSize(queued: number): number {
  return Math.min(MAX_BATCH, Math.ceil(queued / BATCHES_IN_FLIGHT))
}

interface Pending {
  call: StoreCall
  resolve: (decisions: PolicyDecision[]) => void
  reject: (error: unknown) => void
}

/** Redis key of one policy's state: the user key is the hash tag, so a call's keys share a slot. */
export function redisKey(prefix: string, key: string, policy: string): string {
  return `${prefix}:{${hashTag(key)}}:${policy}`
}

/** Redis key of a policy's block of a key: braces cannot occur in a policy name, so no policy's state key is named so. */
export function blockKey(prefix: string, key: string, policy: string): string {
  return `${redisKey(prefix, key, policy)}{block}`
}

/**
 * What Redis hashes of `redisKey`'s names: the tag runs from the first `{` (the
 * one after the prefix, which has none) to the next `}`, so a key's own `}` ends
 * it. Keys that start alike up to their first `}` (`{tenant:7}` and
 * `{tenant:7}user:42`) share a slot.
 */
export function slotTag(key: string): string {
  const tagged = hashTag(key)
  const end = tagged.indexOf('}')
  return end === -1 ? tagged : tagged.slice(0, end)
}

/** A call's keys (in policy order) refused on a Cluster: what was wrong, and what to do. */
export function clusterSpanError(policies: readonly ResolvedPolicy[], keys: readonly string[]): ArgumentError {
  const tags = keys.map((key, i) => `${policies[i]?.name}: "${key}" (tag "${slotTag(key)}")`).join(', ')
  return new ArgumentError('keys', keys, `must share a hash tag on a Redis Cluster, as one atomic script touches one hash slot; here ${tags}`, 'start each key with the same {tag}, e.g. "{tenant:7}" and "{tenant:7}user:42"')
}

/**
 * Redis ignores an empty hash tag (`{}`) and hashes the whole name: a user key
 * starting with `}` would spread a call's keys over slots, and a Cluster would
 * refuse the call (CROSSSLOT). A leading `}` or `\` gets a `\` before it: the tag
 * is never empty, and distinct keys keep distinct names.
 */
function hashTag(key: string): string {
  return key.startsWith('}') || key.startsWith('\\') ? `\\${key}` : key
}

/**
 * Flushes run on the event loop's own setImmediate, taken when this module loads:
 * an application's tests that fake timers later (node:test's `mock.timers`) must
 * not leave every decision waiting for a tick that never comes. A runtime
 * without one (Deno has none as a global) flushes in a microtask.
 */
const nextTurn: (flush: () => void) => unknown = typeof globalThis.setImmediate === 'function' ? globalThis.setImmediate : queueMicrotask

/** Clients already warned of re-sending commands after a reconnect. */
const warnedClients = new WeakSet<object>()

export class RedisStore implements Store {
  private readonly runner: ScriptRunner
  private readonly owned: boolean
  private readonly ready: Promise<void>
  private clientTime: boolean
  private serverChecked = false
  private readonly warn: (message: string) => void
  /** Per-policy script arguments, built once per limiter's policy list. */
  private readonly argsOf = new WeakMap<readonly ResolvedPolicy[], string[]>()
  private queue: Pending[] = []
  private flushScheduled = false
  /** Batches sent and not yet answered: close() waits for them before it quits. */
  private readonly sending = new Set<Promise<void>>()
  private closed = false
  private closing: Promise<void> | undefined

  constructor(options: RedisStoreOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new ArgumentError('options', options, 'must be an object with "client" or "url"', typeof options === 'string' ? 'pass a URL as new RedisStore({ url })' : undefined)
    }
    if (isRedisClient(options)) {
      throw new ArgumentError('options', options, 'must be an object with "client" or "url"', 'pass the client as new RedisStore({ client })')
    }
    rejectUnknown('a RedisStore option', options, OPTIONS)
    if ((options.client === undefined) === (options.url === undefined)) {
      throw new ArgumentError('client', options.client, 'or url is required, and only one of them')
    }
    if (options.time !== undefined) checkChoice('time', options.time, ['server', 'client'])
    if (options.functions !== undefined && typeof options.functions !== 'boolean') {
      throw new ArgumentError('functions', options.functions, 'must be true or false')
    }
    this.clientTime = options.time === 'client'
    if (options.onWarning !== undefined && typeof options.onWarning !== 'function') throw new ArgumentError('onWarning', options.onWarning, 'must be a function')
    this.warn = warningTo(options.onWarning, 'SLUICE_REDIS')
    const runnerOptions = { functions: options.functions === true, onWarning: this.warn }
    if (options.url !== undefined) {
      const problem = redisUrlProblem(options.url)
      if (problem !== undefined) throw new ArgumentError('url', options.url, problem)
      const { runner, ready } = connect(options.url, runnerOptions)
      this.runner = runner
      this.ready = ready
      this.owned = true
    } else {
      this.runner = runnerFor(options.client, runnerOptions)
      this.ready = Promise.resolve()
      this.owned = false
      // To the process once per client: stores made over one client share its setting (one store per limiter, say).
      const told = options.onWarning === undefined && warnedClients.has(options.client as object)
      if (resendsAfterReconnect(options.client) && !told) {
        if (options.onWarning === undefined) warnedClients.add(options.client as object)
        this.warn('sluice: this ioredis client re-sends the commands in flight when its connection drops (autoResendUnfulfilledCommands, true by default): a decision Redis already made can be made, and charged, again. Create it with { autoResendUnfulfilledCommands: false } (and a commandTimeout), or pass { url } and let the store open its connection.')
      }
    }
  }

  /**
   * Decides the call in the next script invocation: calls issued in the same
   * turn of the event loop (requests read from many sockets at once) go
   * together, in order, up to MAX_BATCH per invocation (on a cluster, per user
   * key). Each is decided exactly as it would be alone.
   */
  consume(call: StoreCall): Promise<PolicyDecision[]> {
    if (this.closed) return Promise.reject(closedError())
    if (call.keys !== undefined && this.runner.cluster && !spans(this, call.keys)) {
      return Promise.reject(clusterSpanError(call.policies, call.keys))
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ call, resolve, reject })
      if (!this.flushScheduled) {
        this.flushScheduled = true
        // Not a microtask: a server reads each socket's request in a callback of its own, and
        // microtasks run between them, so each request would be a script invocation (and a
        // write to the socket) of its own. An immediate runs once this turn's I/O callbacks are
        // done: every request read in the turn goes in one invocation (the Express and Fastify
        // servers of bench/http.ts on Redis spent a quarter to a half less CPU per request).
        nextTurn(() => this.flush())
      }
    })
  }

  async reset(prefix: string, key: string, policies: readonly ResolvedPolicy[]): Promise<void> {
    if (this.closed) throw closedError()
    // Calls queued before the reset reach Redis before it (one connection keeps order).
    this.flush()
    await this.ready
    const keys = policies.flatMap((policy) => [
      redisKey(prefix, key, policy.name),
      ...(policy.blockMs === undefined ? [] : [blockKey(prefix, key, policy.name)]),
    ])
    await this.untilSlotSettles(() => this.runner.del(keys))
  }

  private flush(): void {
    this.flushScheduled = false
    if (this.queue.length === 0) return
    const queue = this.queue
    this.queue = []
    const groups = new Map<string, Pending[]>()
    for (const pending of queue) {
      const group = this.runner.cluster ? this.spanOf(pending.call.keys?.[0] ?? pending.call.key) : ''
      const batch = groups.get(group)
      if (batch === undefined) groups.set(group, [pending])
      else batch.push(pending)
    }
    for (const group of groups.values()) {
      const size = batchSize(group.length)
      for (let i = 0; i < group.length; i += size) {
        const sent = this.send(group.slice(i, i + size))
        this.sending.add(sent)
        void sent.then(() => this.sending.delete(sent))
      }
    }
  }

  private async send(batch: Pending[]): Promise<void> {
    try {
      await this.ready
      let reply: unknown
      try {
        reply = await this.untilSlotSettles(() => this.run(batch))
      } catch (error) {
        const serverTime = batch.some((pending) => pending.call.now === undefined)
        if (!serverTime || this.clientTime || !String((error as Error)?.message).includes('SLUICE_NO_TIME')) throw error
        this.clientTime = true
        this.warn('sluice: this Redis refuses TIME inside scripts; deciding with this process\'s clock instead. Keep app servers\' clocks in sync (NTP), or windows split across servers.')
        reply = await this.untilSlotSettles(() => this.run(batch))
      }
      const decisions = decode(reply, batch)
      batch.forEach((pending, i) => pending.resolve(decisions[i] as PolicyDecision[]))
      if (!this.serverChecked) {
        this.serverChecked = true
        // Advice only: nothing it meets may become an unhandled rejection.
        this.checkServer().catch(() => {})
      }
    } catch (error) {
      const failure = asStoreFailure(error)
      for (const pending of batch) pending.reject(failure)
    }
  }

  /**
   * What a Redis can be set up to do that quietly undoes limits, checked once,
   * when it first answers; where INFO is refused, nothing is said. A Cluster
   * node reached as a single server decides the keys of its own slots and
   * fails the rest with MOVED: a quick try may well not meet one. A Redis that
   * evicts keys when full drops limiter state as readily as cache entries: a
   * client's count starts again from zero, and no call fails to say so.
   */
  private async checkServer(): Promise<void> {
    if (!this.runner.cluster) {
      const cluster = await this.runner.info('cluster').catch(() => undefined)
      if (typeof cluster === 'string' && /^cluster_enabled:1/m.test(cluster)) {
        this.warn('sluice: this Redis is a node of a Cluster, reached as a single server: calls on keys whose slots other nodes hold fail (MOVED). Connect to the Cluster as one (the gateway\'s store.cluster, ioredis\'s Redis.Cluster, node-redis\'s createCluster).')
      }
    }
    const info = await this.runner.info('memory').catch(() => undefined)
    if (typeof info !== 'string') return
    const maxmemory = Number(/^maxmemory:(\d+)/m.exec(info)?.[1] ?? 0)
    const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1]
    if (maxmemory > 0 && policy !== undefined && policy !== 'noeviction') {
      this.warn(`sluice: this Redis evicts keys when it reaches maxmemory (maxmemory-policy ${policy}, maxmemory ${maxmemory} bytes): an evicted key's limit starts again from zero, silently. Use maxmemory-policy noeviction (a full Redis then fails calls, and the limiter's onStoreFailure decides) or a Redis of the limiter's own.`)
    }
  }

  /** One script invocation spans keys on a single server; on a Cluster it touches one hash slot (see spanOf). */
  get spansKeys(): boolean {
    return !this.runner.cluster
  }

  /** The hash tag of a key's Redis keys: keys with the same one live in one slot, so one script can span them. */
  spanOf(key: string): string {
    return slotTag(key)
  }

  /** `send` (a batch's script, a reset's DEL), sent again while its slot is being moved (see TRY_AGAIN_FOR_MS). */
  private async untilSlotSettles<T>(send: () => Promise<T>): Promise<T> {
    const giveUpAt = Date.now() + TRY_AGAIN_FOR_MS
    for (let pauseMs = TRY_AGAIN_FIRST_PAUSE_MS; ; pauseMs *= 2) {
      try {
        return await send()
      } catch (error) {
        const wait = Math.min(pauseMs, giveUpAt - Date.now())
        if (!this.runner.cluster || !String((error as Error)?.message).startsWith('TRYAGAIN') || wait <= 0) throw error
        await sleep(wait)
      }
    }
  }

  /** One script invocation for the batch (see lua/limit.lua for the layout). */
  private run(batch: Pending[]): Promise<unknown> {
    const keys: string[] = []
    const args: string[] = ['0']
    const setIndex = new Map<readonly ResolvedPolicy[], number>()
    const runs: string[] = []
    let previous: StoreCall | undefined
    let previousNow = ''
    let runLength = 0
    for (const { call } of batch) {
      let index = setIndex.get(call.policies)
      if (index === undefined) {
        index = setIndex.size + 1
        setIndex.set(call.policies, index)
        args.push(...this.setArgs(call.policies))
      }
      const { policies, keys: ownKeys } = call
      for (let i = 0; i < policies.length; i++) keys.push(redisKey(call.prefix, ownKeys?.[i] ?? call.key, (policies[i] as ResolvedPolicy).name))
      for (let i = 0; i < policies.length; i++) {
        const policy = policies[i] as ResolvedPolicy
        if (policy.blockMs !== undefined) keys.push(blockKey(call.prefix, ownKeys?.[i] ?? call.key, policy.name))
      }
      const now = call.now !== undefined ? String(call.now) : this.clientTime ? String(monotonicClock()) : ''
      // Consecutive calls alike in all but their key share one run descriptor.
      if (previous !== undefined && now === previousNow && call.cost === previous.cost &&
        call.maxWaitMs === previous.maxWaitMs && call.policies === previous.policies) {
        runLength++
      } else {
        // A run's length is its last value, written when the run ends.
        if (runLength > 0) runs.push(String(runLength))
        runs.push(now, String(call.cost), String(call.maxWaitMs), String(index))
        runLength = 1
      }
      previous = call
      previousNow = now
    }
    runs.push(String(runLength))
    args[0] = String(setIndex.size)
    for (const value of runs) args.push(value)
    return this.runner.runLimit(keys, args)
  }

  /** A policy set's script arguments: n, then per policy its algorithm, four parameters and blockMs. */
  private setArgs(policies: readonly ResolvedPolicy[]): string[] {
    let args = this.argsOf.get(policies)
    if (args === undefined) {
      args = [String(policies.length), ...policies.flatMap(scriptArgs)]
      this.argsOf.set(policies, args)
    }
    return args
  }

  async ping(): Promise<void> {
    if (this.closed) throw closedError()
    await this.ready
    await this.runner.ping()
  }

  /**
   * Closes the connection the store opened from a URL, once the calls made
   * before are answered (they are not lost: each is decided, or fails as it
   * would have); later calls fail at once. A client you passed stays open,
   * and the store goes on using it.
   */
  close(): Promise<void> {
    if (!this.owned) return Promise.resolve()
    this.closing ??= this.closeOwned()
    return this.closing
  }

  private async closeOwned(): Promise<void> {
    this.closed = true
    this.flush()
    await Promise.all(this.sending)
    await this.runner.quit()
  }
}

function closedError(): StoreNotAppliedError {
  return new StoreNotAppliedError('this RedisStore is closed (its close() was called): nothing is sent to Redis after it')
}

/** The six script arguments of one policy: algorithm, its parameters, then blockMs ('' for none). */
function scriptArgs(policy: ResolvedPolicy): string[] {
  return [...algorithmArgs(policy), policy.blockMs === undefined ? '' : String(policy.blockMs)]
}

function algorithmArgs(policy: ResolvedPolicy): string[] {
  switch (policy.algorithm) {
    case 'fixed-window':
    case 'sliding-log':
    case 'sliding-window':
      return [policy.algorithm, String(policy.limit), String(policy.windowMs), '', '']
    case 'token-bucket':
      return [policy.algorithm, String(policy.capacity), String(policy.refillTokens), String(policy.refillIntervalMs), policy.refill]
    case 'leaky-bucket':
      return [policy.algorithm, String(policy.capacity), String(policy.leakTokens), String(policy.leakIntervalMs), policy.mode]
  }
}

/** Splits the script's flat reply into each call's decisions (see lua/limit.lua). */
function decode(reply: unknown, batch: Pending[]): PolicyDecision[][] {
  const expected = batch.reduce((sum, { call }) => sum + FIELDS_PER_POLICY * call.policies.length, 0)
  if (!Array.isArray(reply) || reply.length !== expected) {
    throw new SluiceError('ERR_SLUICE_REDIS_REPLY', `unexpected reply from the limit script: ${JSON.stringify(reply)?.slice(0, 200)}`)
  }
  const n = reply as unknown[]
  let at = 0
  return batch.map(({ call }) => call.policies.map((policy) => {
    const verdict = Number(n[at + 2])
    const decision: PolicyDecision = {
      policy: policy.name,
      allowed: verdict >= 0,
      limit: limitOf(policy),
      remaining: Number(n[at]),
      resetAfterMs: Number(n[at + 1]),
      moreAfterMs: Number(n[at + 3]),
      retryAfterMs: verdict >= 0 ? 0 : -1 - verdict,
      waitMs: verdict >= 0 ? verdict : 0,
    }
    at += FIELDS_PER_POLICY
    return decision
  }))
}

/** ioredis settings for a limiter's connection (also for Sentinel and Cluster clients). */
export const LIMITER_CLIENT_OPTIONS = Object.freeze({
  // A decision never waits in an unbounded queue for a connection: it fails
  // fast and the limiter's failure policy decides.
  enableOfflineQueue: false,
  // A script in flight during a reconnect is not re-sent: charged at most once.
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 1,
  commandTimeout: 1000,
  connectTimeout: 2000,
  // How long a closed connection's socket may take to end. ioredis also arms this timer for a
  // socket already gone (the server was down), and it then holds the process open that long.
  disconnectTimeout: 200,
})

/**
 * Opens an ioredis connection configured for a limiter. ioredis is an optional
 * peer dependency, loaded only here.
 */
function connect(url: string, runnerOptions: RunnerOptions): { runner: ScriptRunner; ready: Promise<void> } {
  const loading = import('ioredis').then(({ Redis }) => {
    const client = new Redis(url, LIMITER_CLIENT_OPTIONS)
    // Reported through the failing calls, which name it; the client reconnects.
    trackConnectionErrors(client, { tls: url.startsWith('rediss:') })
    // Redis refuses a SELECT of a database it does not have (or any but 0 in a cluster, or
    // one an ACL user may not use); ioredis reports that and goes on, on database 0, where
    // the counts would be another database's. Every call fails instead, naming why, until
    // a connection selects it (checked again on each reconnect).
    client.on('connect', () => { selectRefused = undefined })
    client.on('error', (error: Error) => { selectRefused = selectRefusal(error) ?? selectRefused })
    return client
  })
  let selectRefused: string | undefined
  const onNamedDatabase = (): void => {
    if (selectRefused !== undefined) throw new StoreNotAppliedError(selectRefused)
  }
  let runner: ScriptRunner | undefined
  const ready = loading.then(
    (client) =>
      new Promise<void>((resolve) => {
        runner = runnerFor(client, runnerOptions)
        if (client.status === 'ready') return resolve()
        // Wait for the first connection, but never much longer than a connect timeout,
        // and not at all once it has failed: calls then fail at once, naming the
        // connection's error, instead of timing out on a refused connection.
        const settle = (): void => {
          clearTimeout(timer)
          client.off('ready', settle)
          client.off('error', settle)
          resolve()
        }
        // A little past the client's own connect timeout, so that its error (ETIMEDOUT) is the one calls name.
        const timer = setTimeout(settle, LIMITER_CLIENT_OPTIONS.connectTimeout + 250)
        client.once('ready', settle)
        client.once('error', settle)
      }),
  )
  const deferred: ScriptRunner = {
    cluster: false, // a URL names one server
    runLimit: async (keys, args) => { await ready; onNamedDatabase(); return (runner as ScriptRunner).runLimit(keys, args) },
    del: async (keys) => { await ready; onNamedDatabase(); return (runner as ScriptRunner).del(keys) },
    ping: async () => { await ready; onNamedDatabase(); return (runner as ScriptRunner).ping() },
    info: async (section) => { await ready; onNamedDatabase(); return (runner as ScriptRunner).info(section) },
    // Closing never waits for a connection, and always stops reconnecting: QUIT
    // when connected, else drop the socket (QUIT would be refused offline).
    quit: async () => {
      const client = await loading
      if (client.status === 'ready') await client.quit().catch(() => client.disconnect())
      else client.disconnect()
    },
  }
  return { runner: deferred, ready }
}
