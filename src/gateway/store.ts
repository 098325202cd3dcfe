/**
 * The store a gateway config names: the embedded memory store, or Redis by
 * URL, Sentinel or Cluster. ioredis is an optional peer dependency, loaded
 * only when the config asks for Redis.
 */
import { MemoryStore } from '../stores/memory/memory-store.ts'
import { trackConnectionErrors } from '../stores/redis/clients.ts'
import { LIMITER_CLIENT_OPTIONS, RedisStore } from '../stores/redis/redis-store.ts'
import type { Store } from '../stores/store.ts'
import type { GatewayConfig } from './config.ts'

export interface OpenedStore {
  store: Store
  /** For logs and /status, without secrets: `memory`, `redis 127.0.0.1:6379`, `redis-cluster (3 nodes)`. */
  description: string
  close(): Promise<void>
}

/** `onWarning` hears what the store finds wrong with its Redis (eviction, TIME refused). */
export async function openStore(config: GatewayConfig, onWarning: (message: string) => void): Promise<OpenedStore> {
  const options = config.store
  if (options.type === 'memory') {
    return { store: new MemoryStore(options.maxKeys !== undefined ? { maxKeys: options.maxKeys } : {}), description: 'memory', close: async () => {} }
  }
  const storeOptions = { ...(options.time !== undefined ? { time: options.time } : {}), ...(options.functions !== undefined ? { functions: options.functions } : {}), onWarning }
  if (options.url !== undefined) {
    const store = new RedisStore({ url: options.url, ...storeOptions })
    // As for Sentinel and Cluster below: the first requests are decided by Redis, not by the failure policy.
    await store.ping().catch(() => { /* down at start: the failure policy and the health probe take over */ })
    const url = new URL(options.url)
    return { store, description: `redis ${url.host}`, close: () => store.close() }
  }
  const ioredis = await import('ioredis').catch(() => {
    throw new Error('store: Redis Sentinel and Cluster need the ioredis package (npm install ioredis)')
  })
  const password = options.password !== undefined ? { password: options.password } : {}
  if (options.sentinel !== undefined) {
    const client = new ioredis.Redis({
      ...LIMITER_CLIENT_OPTIONS,
      ...password,
      name: options.sentinel.name,
      sentinels: options.sentinel.sentinels.map(hostPort),
      ...(options.sentinel.password !== undefined ? { sentinelPassword: options.sentinel.password } : {}),
    })
    // Reported through failing decisions and the health probe, which name it.
    trackConnectionErrors(client)
    await connected(client)
    const store = new RedisStore({ client, ...storeOptions })
    return { store, description: `redis-sentinel ${options.sentinel.name}`, close: () => quit(client) }
  }
  const nodes = (options.cluster as string[]).map((node) => hostPort(node.replace(/^rediss?:\/\//, '')))
  const client = new ioredis.Cluster(nodes, {
    enableOfflineQueue: false,
    // A call that meets its slot half moved (resharding) is sent again in 10 ms, not ioredis's 100:
    // a slot moves in milliseconds, and the limiter waits 250 ms for an answer.
    retryDelayOnTryAgain: 10,
    redisOptions: { ...LIMITER_CLIENT_OPTIONS, ...password },
  })
  // Reported through failing decisions and the health probe, which name it.
  trackConnectionErrors(client)
  await connected(client)
  const store = new RedisStore({ client, ...storeOptions })
  return { store, description: `redis-cluster (${nodes.length} seed nodes)`, close: () => quit(client) }
}

/**
 * Waits (up to 5 s) for the first connection, so the first requests are decided
 * by Redis, not by the failure policy. A store still down after that is left
 * to the failure policy and the health probe: the gateway starts anyway.
 */
function connected(client: { status: string; once(event: 'ready', listener: () => void): unknown; off(event: 'ready', listener: () => void): unknown }): Promise<void> {
  if (client.status === 'ready') return Promise.resolve()
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      client.off('ready', done)
      resolve()
    }
    const timer = setTimeout(done, 5000)
    client.once('ready', done)
  })
}

function hostPort(value: string): { host: string; port: number } {
  const at = value.lastIndexOf(':')
  return { host: value.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(value.slice(at + 1)) }
}

async function quit(client: { status: string; quit(): Promise<unknown>; disconnect(): void }): Promise<void> {
  if (client.status === 'ready') await client.quit().catch(() => client.disconnect())
  else client.disconnect()
}
