/**
 * Telling the Redis drivers apart by the commands only they have. Imports
 * nothing at run time, so the limiter can recognise a client passed where a
 * store goes without loading the Redis store.
 */
import type { IoredisClient, NodeRedisClient, RedisClient } from './clients.ts'

/** An ioredis or node-redis client (or cluster): what `client` takes, and what is often passed where a store goes. */
export function isRedisClient(value: unknown): value is RedisClient {
  return isIoredis(value) || isNodeRedis(value)
}

export function isIoredis(client: unknown): client is IoredisClient {
  return typeof client === 'object' && client !== null && typeof (client as IoredisClient).defineCommand === 'function'
}

export function isNodeRedis(client: unknown): client is NodeRedisClient {
  return typeof client === 'object' && client !== null && typeof (client as NodeRedisClient).evalSha === 'function'
}
